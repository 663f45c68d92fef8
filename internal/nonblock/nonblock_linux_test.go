//go:build linux

package nonblock

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// An eventfd's count goes through Write and Read, and an empty one
// answers EAGAIN instead of blocking.
func TestEventfdRoundTrip(t *testing.T) {
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	require.NoError(t, err)
	defer unix.Close(fd)
	var b [8]byte
	_, err = Read(fd, b[:])
	require.ErrorIs(t, err, unix.EAGAIN)
	b[0] = 3
	n, err := Write(fd, b[:])
	require.NoError(t, err)
	require.Equal(t, 8, n)
	clear(b[:])
	n, err = Read(fd, b[:])
	require.NoError(t, err)
	require.Equal(t, 8, n)
	require.Equal(t, byte(3), b[0])
}

// A receive with MSG_DONTWAIT on an empty socket returns EAGAIN, and one
// after a send returns the datagram.
func TestSyscall6ReceivesWithoutBlocking(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	var b [16]byte
	recv := func() (uintptr, unix.Errno) {
		r, _, e := Syscall6(unix.SYS_RECVFROM, uintptr(fds[1]), uintptrOf(b[:]), uintptr(len(b)), unix.MSG_DONTWAIT, 0, 0)
		return r, e
	}
	_, e := recv()
	require.Equal(t, unix.EAGAIN, e)
	_, err = Write(fds[0], []byte("ping"))
	require.NoError(t, err)
	n, e := recv()
	require.Zero(t, e)
	require.Equal(t, "ping", string(b[:n]))
}

func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(&b[0])) }
