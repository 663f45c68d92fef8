//go:build !linux

package nspair

import "os/exec"

// AllowedCPUs: pinning is by taskset, which is Linux's; elsewhere runs go
// where the scheduler puts them.
func AllowedCPUs(n int) []int { return nil }

// Pinned is Command: nothing pins elsewhere (AllowedCPUs gives no CPU).
func Pinned(cpu int, ns, name string, args ...string) *exec.Cmd { return Command(ns, name, args...) }
