//go:build linux

package plugin

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"

	"vroce.dev/internal/unixsock"

	"golang.org/x/sys/unix"
)

// A device's descriptors cross the SOCK_SEQPACKET socket as one message:
// the device's ID (8 bytes, little-endian) and, as SCM_RIGHTS, its memfd
// and its four doorbells in deviceFD order.
const (
	fdRegion = iota
	fdTxData // host -> plugin ring: the plugin waits on it
	fdTxRoom // host -> plugin ring: the host waits on it when full
	fdRxData // plugin -> host ring: the host waits on it
	fdRxRoom // plugin -> host ring: the plugin waits on it when full
	fdsPerDevice
)

// errFDMessage is wrapped by every error of a malformed device message.
var errFDMessage = errors.New("vroce plugin: bad descriptor message")

// socketpair makes the descriptor socket: the host's end as a conn and
// the plugin's as a file to hand it at launch.
func socketpair() (*net.UnixConn, *os.File, error) {
	c, theirs, err := unixsock.Pair(unix.SOCK_SEQPACKET)
	if err != nil {
		return nil, nil, fmt.Errorf("vroce plugin: %w", err)
	}
	return c, os.NewFile(uintptr(theirs), "vroce-plugin-fds"), nil
}

// sendDeviceFDs sends device id's descriptors.
func sendDeviceFDs(c *net.UnixConn, id uint64, fds [fdsPerDevice]int) error {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], id)
	_, _, err := c.WriteMsgUnix(b[:], unix.UnixRights(fds[:]...), nil)
	return err
}

// recvDeviceFDs receives the next device message; io.EOF when the host
// hung up.
func recvDeviceFDs(c *net.UnixConn) (uint64, [fdsPerDevice]int, error) {
	var b [16]byte
	oob := make([]byte, unix.CmsgSpace(4*(fdsPerDevice+1)))
	n, oobn, flags, _, err := c.ReadMsgUnix(b[:], oob)
	if errors.Is(err, io.EOF) || err == nil && n == 0 && oobn == 0 {
		return 0, [fdsPerDevice]int{}, errHungUp
	}
	if err != nil {
		return 0, [fdsPerDevice]int{}, err
	}
	id, fds, got, err := parseDeviceMessage(b[:n], oob[:oobn], flags)
	if err != nil {
		for _, fd := range got {
			unix.Close(fd)
		}
	}
	return id, fds, err
}

var errHungUp = errors.New("vroce plugin: the other process hung up")

// parseDeviceMessage decodes a device message: its ID and descriptors.
// got lists every descriptor the message carried, for the caller to
// close when it is refused.
func parseDeviceMessage(b, oob []byte, flags int) (id uint64, fds [fdsPerDevice]int, got []int, err error) {
	got, perr := unixsock.Rights(oob)
	switch {
	case perr != nil:
		return 0, fds, got, fmt.Errorf("%w: control data: %v", errFDMessage, perr)
	case flags&(unix.MSG_CTRUNC|unix.MSG_TRUNC) != 0:
		return 0, fds, got, fmt.Errorf("%w: truncated (flags %#x)", errFDMessage, flags)
	case len(b) != 8:
		return 0, fds, got, fmt.Errorf("%w: %d bytes, want 8", errFDMessage, len(b))
	case len(got) != fdsPerDevice:
		return 0, fds, got, fmt.Errorf("%w: %d descriptors, want %d", errFDMessage, len(got), fdsPerDevice)
	}
	copy(fds[:], got)
	return binary.LittleEndian.Uint64(b), fds, got, nil
}
