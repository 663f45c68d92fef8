//go:build linux

package ring

import (
	"encoding/binary"
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"vroce.dev/internal/nonblock"
)

// Doorbell is an eventfd one process rings and the other waits on. It is
// non-blocking underneath, so a waiting goroutine sleeps in the runtime's
// poller, not in a thread, and Close wakes it.
type Doorbell struct {
	f    *os.File
	fd   int
	ring [8]byte // the value written: 1
	got  [8]byte
	// Ring's raw write and Wait's raw read, made once (a closure per
	// call would allocate), and the read's result: one Wait at a time.
	rc    syscall.RawConn
	write func(fd uintptr) bool
	read  func(fd uintptr) bool
	rerr  error
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
	d.rc, _ = d.f.SyscallConn() // an os.File's cannot fail
	d.write, d.read = d.writeBell, d.readBell
	return d
}

// FD is the eventfd, to pass to the other process; it stays open until
// Close. (os.File.Fd would make it blocking.)
func (d *Doorbell) FD() int { return d.fd }

// Ring wakes a Wait, now or the next one to start. The eventfd is
// non-blocking and its count far from full, so the write skips the
// runtime's system-call entry (internal/nonblock says why); the raw
// conn holds the descriptor open meanwhile, so a Ring racing Close
// cannot write to a number another file has taken.
func (d *Doorbell) Ring() error { return d.rc.Write(d.write) }

// writeBell is Ring's write, inside the raw conn (d.write). Its one
// possible failure, EAGAIN, says the count is already far from zero: the
// bell has rung.
func (d *Doorbell) writeBell(fd uintptr) bool {
	nonblock.Write(int(fd), d.ring[:])
	return true
}

// Wait sleeps until the doorbell rings (or has rung since the last Wait)
// and returns; after Close it returns an error.
func (d *Doorbell) Wait() error {
	if err := d.rc.Read(d.read); err != nil {
		return err
	}
	return d.rerr
}

// readBell is Wait's read, inside the raw conn (d.read): false, to wait
// in the poller, while the bell has not rung.
func (d *Doorbell) readBell(fd uintptr) bool {
	_, err := nonblock.Read(int(fd), d.got[:])
	if err == unix.EAGAIN {
		return false
	}
	d.rerr = err
	return true
}

// Close closes the eventfd and wakes a Wait.
func (d *Doorbell) Close() error { return d.f.Close() }
