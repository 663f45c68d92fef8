//go:build !linux

package main

// placements: pinning is by taskset, which is Linux's; elsewhere latency
// runs where the scheduler puts them.
func placements() []placement { return nil }
