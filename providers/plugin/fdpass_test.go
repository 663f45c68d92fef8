//go:build linux

package plugin

import (
	"errors"
	"testing"

	"vroce.dev/internal/unixsock"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// A device message crosses with its descriptors; one with too few is
// refused and the descriptors it did carry are closed.
func TestDeviceMessages(t *testing.T) {
	host, child, err := socketpair()
	require.NoError(t, err)
	defer host.Close()
	dup, err := unix.Dup(int(child.Fd()))
	require.NoError(t, err)
	child.Close()
	fc, err := unixsock.ConnOf(dup)
	require.NoError(t, err)
	defer fc.Close()

	var fds [fdsPerDevice]int
	for i := range fds {
		fds[i], err = unix.Eventfd(0, unix.EFD_CLOEXEC)
		require.NoError(t, err)
		defer unix.Close(fds[i])
	}
	require.NoError(t, sendDeviceFDs(host, 42, fds))
	id, got, err := recvDeviceFDs(fc)
	require.NoError(t, err)
	assert.Equal(t, uint64(42), id)
	for _, fd := range got {
		var st unix.Stat_t
		require.NoError(t, unix.Fstat(fd, &st), "a live descriptor")
		unix.Close(fd)
	}

	_, _, err = host.WriteMsgUnix([]byte("12345678"), unix.UnixRights(fds[0]), nil)
	require.NoError(t, err)
	_, _, err = recvDeviceFDs(fc)
	assert.ErrorIs(t, err, errFDMessage)

	host.Close()
	_, _, err = recvDeviceFDs(fc)
	assert.ErrorIs(t, err, errHungUp)
}

func FuzzParseDeviceMessage(f *testing.F) {
	f.Add([]byte("12345678"), unix.UnixRights(3, 4, 5, 6, 7), 0)
	f.Add([]byte("1234"), unix.UnixRights(3), 0)
	f.Add([]byte("12345678"), []byte{1, 2, 3}, unix.MSG_CTRUNC)
	f.Fuzz(func(t *testing.T, b, oob []byte, flags int) {
		_, _, got, err := parseDeviceMessage(b, oob, flags)
		if err != nil && !errors.Is(err, errFDMessage) {
			t.Fatalf("untyped error %v", err)
		}
		if err == nil && len(got) != fdsPerDevice {
			t.Fatalf("accepted %d descriptors", len(got))
		}
	})
}
