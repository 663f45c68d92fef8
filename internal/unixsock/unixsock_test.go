//go:build linux

package unixsock

import (
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// A descriptor sent over a pair arrives as a live one; control data that
// lies about its length is cut, not trusted.
func TestPairAndRights(t *testing.T) {
	c, theirs, err := Pair(unix.SOCK_SEQPACKET)
	require.NoError(t, err)
	defer c.Close()
	other, err := ConnOf(theirs)
	require.NoError(t, err)
	defer other.Close()

	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	require.NoError(t, err)
	defer unix.Close(efd)
	_, _, err = c.WriteMsgUnix([]byte("x"), unix.UnixRights(efd), nil)
	require.NoError(t, err)
	oob := make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, err := other.ReadMsgUnix(make([]byte, 1), oob)
	require.NoError(t, err)
	fds, err := Rights(oob[:oobn])
	require.NoError(t, err)
	require.Len(t, fds, 1)
	var st unix.Stat_t
	assert.NoError(t, unix.Fstat(fds[0], &st), "a live descriptor")
	CloseAll(fds...)

	bad := unix.UnixRights(3)
	bad[0]-- // the header's length no longer whole descriptors
	got, _ := Rights(bad)
	assert.Empty(t, got)
}

func FuzzRights(f *testing.F) {
	f.Add(unix.UnixRights(3, 4, 5))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, oob []byte) {
		Rights(oob) // returns, whatever oob holds
	})
}

// FileConn gives the conn of the socket's own kind, and refuses, closing
// the descriptor, a socket of another kind.
func TestFileConnOfEachKind(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	dup := func() int {
		f, err := ln.(*net.TCPListener).File()
		require.NoError(t, err)
		defer f.Close()
		fd, err := unix.Dup(int(f.Fd()))
		require.NoError(t, err)
		return fd
	}
	fd := dup()
	_, err = FileConn[*net.UnixConn](fd)
	assert.ErrorContains(t, err, "not a *net.UnixConn")
	_, err = unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	assert.ErrorIs(t, err, unix.EBADF, "the descriptor was taken over and closed")

	c, theirs, err := Pair(unix.SOCK_STREAM)
	require.NoError(t, err)
	defer c.Close()
	other, err := FileConn[*net.UnixConn](theirs)
	require.NoError(t, err, "a Unix socket as a *net.UnixConn")
	other.Close()
}
