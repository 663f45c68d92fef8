//go:build linux

package unixsock

import (
	"encoding/binary"
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// Pair makes a socketpair of type typ (SOCK_STREAM, SOCK_SEQPACKET),
// close-on-exec: the first end as a conn for this process, the second as
// a descriptor to hand to another.
func Pair(typ int) (*net.UnixConn, int, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, typ|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, -1, fmt.Errorf("socketpair: %w", err)
	}
	c, err := ConnOf(fds[0])
	if err != nil {
		unix.Close(fds[1])
		return nil, -1, err
	}
	return c, fds[1], nil
}

// ConnOf makes a *net.UnixConn of a Unix socket descriptor, which it
// takes over (closing it on an error too).
func ConnOf(fd int) (*net.UnixConn, error) { return FileConn[*net.UnixConn](fd) }

// FileConn makes a conn of type C (*net.UnixConn, *net.TCPConn) of a
// socket descriptor, which it takes over (closing it on an error too); a
// socket of another kind is an error.
func FileConn[C net.Conn](fd int) (C, error) {
	var none C
	f := os.NewFile(uintptr(fd), "socket")
	defer f.Close() // FileConn has its own copy
	c, err := net.FileConn(f)
	if err != nil {
		return none, err
	}
	cc, ok := c.(C)
	if !ok {
		c.Close()
		return none, fmt.Errorf("descriptor %d is a %T, not a %T", fd, c, none)
	}
	return cc, nil
}

// Rights returns every descriptor the control data oob carries, in
// order. It trusts nothing of oob: a malformed message ends the list (and
// err says so) and a length that is not whole descriptors is cut, where
// x/sys's ParseUnixRights would panic. The caller owns (and must close)
// every descriptor returned, error or not.
func Rights(oob []byte) (fds []int, err error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	for _, m := range msgs {
		if m.Header.Level != unix.SOL_SOCKET || m.Header.Type != unix.SCM_RIGHTS {
			continue
		}
		for d := m.Data; len(d) >= 4; d = d[4:] {
			fds = append(fds, int(int32(binary.NativeEndian.Uint32(d))))
		}
	}
	return fds, err
}

// CloseAll closes every descriptor of fds.
func CloseAll(fds ...int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}
