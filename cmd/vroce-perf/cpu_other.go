//go:build !unix

package main

import "time"

// processCPU reports nothing where getrusage is missing: results then
// carry no CPU figure.
func processCPU() time.Duration { return 0 }
