//go:build linux

package nonblock

import (
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Syscall6 makes system call trap, which must not block: on a descriptor
// in non-blocking mode, or with MSG_DONTWAIT. Unlike syscall.Syscall's,
// its arguments are not kept alive by the compiler for the call: memory
// an argument points to must be heap memory the caller still refers to
// (its own structures' fields, as every caller here passes), which the
// garbage collector neither frees nor moves.
func Syscall6(trap, a1, a2, a3, a4, a5, a6 uintptr) (r1, r2 uintptr, err syscall.Errno) {
	return unix.RawSyscall6(trap, a1, a2, a3, a4, a5, a6)
}

// Write writes b to fd, which must be non-blocking (an eventfd, say).
func Write(fd int, b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	n, _, e := unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	if e != 0 {
		return int(n), e
	}
	return int(n), nil
}

// Read reads from fd, which must be non-blocking, into b.
func Read(fd int, b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	n, _, e := unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// Spin paces one busy poll: between looks, other threads on this CPU
// run (sched_yield), the process's own included, and other processes'
// (a provider plugin's, the peer's on the same host), whose answer the
// poller may be waiting for. It does not call runtime.Gosched while the
// process has other Ps: Gosched queues the poller globally and wakes an
// idle P's thread to run it (wakep), a futex wake per look whose thread
// then spins for work on the other CPU, against the peer's poller. The
// process's other goroutines run on those Ps anyway; with one P they
// could not, so there it does. (Two processes in two namespaces over
// veth at MTU 1500, VROCE_BUSY_POLL=50us, 64-byte send_lat typical, three
// interleaved runs each: 34-46 us with Gosched at every look and
// sched_yield after 10 us of it, 24-25 without Gosched, 16-19 without
// Gosched and sched_yield from the first look.)
type Spin struct {
	oneP bool // the process has one P: others run only if the poller yields its P
}

// StartSpin begins a busy poll. It reads GOMAXPROCS once, under the
// scheduler's lock, rather than at every look.
func StartSpin() Spin { return Spin{oneP: runtime.GOMAXPROCS(0) == 1} }

// Yield is the pause between two looks.
func (s Spin) Yield() {
	if s.oneP {
		runtime.Gosched()
	}
	unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
}
