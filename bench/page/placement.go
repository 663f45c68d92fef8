package main

import "vroce.dev/bench/internal/nspair"

// placements are the ones this machine has CPUs for: the first two the
// process may run on. None where processes cannot be pinned.
func placements() []placement {
	cpus := nspair.AllowedCPUs(2)
	if len(cpus) == 0 {
		return nil
	}
	ps := []placement{{"one CPU", [2]int{cpus[0], cpus[0]}}}
	if len(cpus) == 2 {
		ps = append(ps, placement{"two CPUs", [2]int{cpus[0], cpus[1]}})
	}
	return ps
}
