//go:build linux

package unixsock

import (
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
