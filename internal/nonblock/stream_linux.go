//go:build linux

package nonblock

import (
	"io"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Stream reads and writes a connected stream socket (a TCP connection, a
// socketpair end) without the runtime's system-call entry, waiting in
// the runtime's poller, as the net package's conns do, when the socket
// has nothing to read or no room. The conn it was made from keeps the
// descriptor, its deadlines and its Close: a Read or Write in progress
// returns when that conn is closed or a deadline passes. One Read and
// one Write may run at once.
type Stream struct {
	rc syscall.RawConn
	// The Read in progress: its buffer, and what the read returned.
	rb    []byte
	rn    int
	rerr  error
	readF func(fd uintptr) bool
	// The Write in progress: what is left of its buffers, what went, and
	// the error; iovs is reused for each writev.
	wb     [][]byte
	wn     int64
	werr   error
	iovs   []unix.Iovec
	one    [1][]byte // Write's buffer list
	writeF func(fd uintptr) bool
}

// NewStream makes a Stream of c's descriptor; c must be a connected
// stream socket in non-blocking mode, as the net package's are.
func NewStream(c syscall.Conn) (*Stream, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	s := &Stream{rc: rc}
	s.readF, s.writeF = s.read, s.write
	return s, nil
}

// Read reads into b; at the peer's end, io.EOF.
func (s *Stream) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	s.rb = b
	err := s.rc.Read(s.readF)
	n, rerr := s.rn, s.rerr
	s.rb, s.rn, s.rerr = nil, 0, nil
	if err != nil {
		return 0, err
	}
	return n, rerr
}

func (s *Stream) read(fd uintptr) bool {
	for {
		n, err := Read(int(fd), s.rb)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			return false // wait until readable
		case err != nil:
			s.rerr = err
		case n == 0:
			s.rerr = io.EOF
		default:
			s.rn = n
		}
		return true
	}
}

// Write writes all of b, or fails.
func (s *Stream) Write(b []byte) (int, error) {
	s.one[0] = b // a buffer list of its own would be an allocation a call
	n, err := s.WriteBuffers(s.one[:])
	s.one[0] = nil
	return int(n), err
}

// WriteBuffers writes all of bufs, in order, with writev, or fails. It
// takes the place of net.Buffers.WriteTo, which uses writev only for the
// net package's own conns, and like it consumes bufs (their elements
// too) as it writes.
func (s *Stream) WriteBuffers(bufs [][]byte) (int64, error) {
	s.wb, s.wn, s.werr = bufs, 0, nil
	for len(s.wb) > 0 && len(s.wb[0]) == 0 {
		s.wb = s.wb[1:]
	}
	var err error
	if len(s.wb) > 0 {
		err = s.rc.Write(s.writeF)
	}
	n, werr := s.wn, s.werr
	s.wb, s.wn, s.werr = nil, 0, nil
	if err == nil {
		err = werr
	}
	return n, err
}

// maxIovecs is how many buffers one writev takes (the kernel's UIO_MAXIOV
// is 1,024).
const maxIovecs = 64

func (s *Stream) write(fd uintptr) bool {
	for len(s.wb) > 0 {
		s.iovs = s.iovs[:0]
		for _, b := range s.wb[:min(len(s.wb), maxIovecs)] {
			if len(b) > 0 {
				iov := unix.Iovec{Base: &b[0]}
				iov.SetLen(len(b))
				s.iovs = append(s.iovs, iov)
			}
		}
		n, _, e := unix.RawSyscall(unix.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&s.iovs[0])), uintptr(len(s.iovs)))
		switch e {
		case 0:
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false // wait until writable, then go on
		default:
			s.werr = e
			return true
		}
		s.wn += int64(n)
		s.consume(int(n))
	}
	return true
}

// consume drops n written bytes from the front of s.wb.
func (s *Stream) consume(n int) {
	for n > 0 {
		if n < len(s.wb[0]) {
			s.wb[0] = s.wb[0][n:]
			return
		}
		n -= len(s.wb[0])
		s.wb = s.wb[1:]
	}
	for len(s.wb) > 0 && len(s.wb[0]) == 0 {
		s.wb = s.wb[1:]
	}
}
