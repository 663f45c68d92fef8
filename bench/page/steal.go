package main

import (
	"bytes"
	"strconv"
	"time"
)

// stealOf reads the steal column of a /proc/stat "cpu" line.
func stealOf(line []byte) time.Duration {
	f := bytes.Fields(line)
	if len(f) < 9 || string(f[0]) != "cpu" {
		return 0
	}
	ticks, err := strconv.ParseInt(string(f[8]), 10, 64)
	if err != nil || ticks < 0 {
		return 0
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}
