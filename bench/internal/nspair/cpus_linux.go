package nspair

import (
	"os/exec"
	"strconv"

	"golang.org/x/sys/unix"
)

// AllowedCPUs is the first n CPUs this process may run on (fewer when it
// has fewer), for pinning the processes of a run: nil when they cannot
// be read.
func AllowedCPUs(n int) []int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil
	}
	var cpus []int
	for c := 0; c < 1024 && len(cpus) < n; c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus
}

// Pinned is Command with the program pinned to one CPU (taskset).
func Pinned(cpu int, ns, name string, args ...string) *exec.Cmd {
	return Command(ns, "taskset", append([]string{"-c", strconv.Itoa(cpu), name}, args...)...)
}
