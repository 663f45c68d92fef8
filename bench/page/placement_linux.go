package main

import "golang.org/x/sys/unix"

// placements are the ones this machine has CPUs for: the first two the
// process may run on.
func placements() []placement {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil
	}
	var cpus []int
	for c := 0; c < 1024 && len(cpus) < 2; c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	if len(cpus) == 0 {
		return nil
	}
	ps := []placement{{"one CPU", [2]int{cpus[0], cpus[0]}}}
	if len(cpus) == 2 {
		ps = append(ps, placement{"two CPUs", [2]int{cpus[0], cpus[1]}})
	}
	return ps
}
