package main

import "golang.org/x/sys/unix"

// schedYield gives the CPU to another thread that wants it, if one does.
// The spinner yields to the kernel, not only to Go's scheduler: between
// two processes on two cores, each spinning with runtime.Gosched, the
// threads that receive for the two devices waited for a CPU, and 2,000
// round trips of ib_write_lat's 2 bytes took 800-1,100 retransmissions
// and 20-30 timeouts (105-161 and none yielding so; typical latency 57
// and 55 us, average 420 and 110-140).
func schedYield() { unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }
