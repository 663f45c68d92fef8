//go:build !unix

package workload

import "time"

// ProcessCPU reports nothing where getrusage is missing: results then
// carry no CPU figure.
func ProcessCPU() time.Duration { return 0 }
