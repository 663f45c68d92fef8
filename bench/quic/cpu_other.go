//go:build !unix

package main

import "time"

// processCPU is unknown here: no CPU per GiB is reported.
func processCPU() time.Duration { return 0 }
