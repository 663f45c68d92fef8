//go:build linux

package nonblock

import (
	"runtime"
	"syscall"
	"time"
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

// Yield is a busy poller's pause between looks, spinning how long it has
// looked so far. For the first ownTurn only the process's own goroutines
// run meanwhile: a socket's answer that comes within a few microseconds
// is caught without a trip through the kernel's scheduler. After that,
// other processes' threads on this CPU may run too (sched_yield): when
// the answer needs them (a provider plugin's process, the peer on the
// same host), a poller that yields only to its goroutines holds the CPU
// until the kernel preempts it. A ring whose producer is always another
// process passes 0. (plugin:udp, VROCE_BUSY_POLL=50us, veth MTU 1500:
// send_lat 80-95 us with Gosched alone, 34 with sched_yield from the
// start everywhere; but then the in-process udp provider's 6.8 became 22.)
func Yield(spinning, ownTurn time.Duration) {
	runtime.Gosched()
	if spinning >= ownTurn {
		unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
	}
}

// SocketTurn is ownTurn for a socket's poller.
const SocketTurn = 10 * time.Microsecond
