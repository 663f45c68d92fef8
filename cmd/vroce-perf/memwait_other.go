//go:build !linux

package main

import "runtime"

// schedYield lets other goroutines run (see memwait_linux.go).
func schedYield() { runtime.Gosched() }
