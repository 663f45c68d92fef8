package main

import (
	"bytes"
	"os"
	"time"
)

// stolen is the time the hypervisor has taken from this machine's CPUs
// since boot: the steal column of /proc/stat's first line, in clock ticks
// of 10 ms (USER_HZ is 100 on every Linux that exports the column). 0
// when it cannot be read.
func stolen() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	return stealOf(line)
}
