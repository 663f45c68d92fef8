//go:build linux

package ring

import (
	"encoding/binary"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Doorbell is an eventfd one process rings and the other waits on. It is
// non-blocking underneath, so a waiting goroutine sleeps in the runtime's
// poller, not in a thread, and Close wakes it.
type Doorbell struct {
	f    *os.File
	fd   int
	ring [8]byte // the value written: 1
	got  [8]byte
}

// NewDoorbell makes a doorbell.
func NewDoorbell() (*Doorbell, error) {
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("ring: eventfd: %w", err)
	}
	return doorbellOn(fd), nil
}

// DoorbellFromFD wraps an eventfd received from the other process, which
// it takes over.
func DoorbellFromFD(fd int) (*Doorbell, error) {
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("ring: doorbell fd %d: %w", fd, err)
	}
	return doorbellOn(fd), nil
}

func doorbellOn(fd int) *Doorbell {
	d := &Doorbell{f: os.NewFile(uintptr(fd), "vroce-doorbell"), fd: fd}
	binary.NativeEndian.PutUint64(d.ring[:], 1)
	return d
}

// FD is the eventfd, to pass to the other process; it stays open until
// Close. (os.File.Fd would make it blocking.)
func (d *Doorbell) FD() int { return d.fd }

// Ring wakes a Wait, now or the next one to start.
func (d *Doorbell) Ring() error {
	_, err := d.f.Write(d.ring[:])
	return err
}

// Wait sleeps until the doorbell rings (or has rung since the last Wait)
// and returns; after Close it returns an error.
func (d *Doorbell) Wait() error {
	_, err := d.f.Read(d.got[:])
	return err
}

// Close closes the eventfd and wakes a Wait.
func (d *Doorbell) Close() error { return d.f.Close() }
