//go:build linux

package nonblock

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Syscall6 makes system call trap, which must not block: on a descriptor
// in non-blocking mode, or with MSG_DONTWAIT.
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
