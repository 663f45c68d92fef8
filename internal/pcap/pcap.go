package pcap

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"
)

const (
	magicMicros    = 0xa1b2c3d4
	magicNanos     = 0xa1b23c4d
	linkEthernet   = 1
	fileHeaderLen  = 24
	recordHdrLen   = 16
	defaultSnapLen = 262144
)

// ErrFormat is wrapped by every error about a malformed capture file.
var ErrFormat = errors.New("pcap: malformed capture")

// Reader reads frames from a capture file.
type Reader struct {
	r     *bufio.Reader
	order binary.ByteOrder
	nanos bool
	snap  uint32
	buf   []byte
	off   int64 // bytes read from the file so far
}

// NewReader reads the file header and returns a Reader positioned at the
// first frame. Only Ethernet captures are accepted.
func NewReader(r io.Reader) (*Reader, error) {
	br := bufio.NewReader(r)
	var h [fileHeaderLen]byte
	if _, err := io.ReadFull(br, h[:]); err != nil {
		return nil, fmt.Errorf("%w: file header: %v", ErrFormat, err)
	}
	rd := &Reader{r: br, off: fileHeaderLen}
	switch {
	case binary.LittleEndian.Uint32(h[:]) == magicMicros:
		rd.order = binary.LittleEndian
	case binary.BigEndian.Uint32(h[:]) == magicMicros:
		rd.order = binary.BigEndian
	case binary.LittleEndian.Uint32(h[:]) == magicNanos:
		rd.order, rd.nanos = binary.LittleEndian, true
	case binary.BigEndian.Uint32(h[:]) == magicNanos:
		rd.order, rd.nanos = binary.BigEndian, true
	default:
		return nil, fmt.Errorf("%w: bad magic %#x", ErrFormat, h[:4])
	}
	rd.snap = rd.order.Uint32(h[16:])
	if lt := rd.order.Uint32(h[20:]); lt != linkEthernet {
		return nil, fmt.Errorf("%w: link type %d, want Ethernet", ErrFormat, lt)
	}
	return rd, nil
}

// Next returns the next frame and its timestamp. The frame is valid until
// the next call. At the end of the file it returns io.EOF.
func (rd *Reader) Next() ([]byte, time.Time, error) {
	var h [recordHdrLen]byte
	if _, err := io.ReadFull(rd.r, h[:]); err != nil {
		if err == io.ErrUnexpectedEOF {
			err = fmt.Errorf("%w: truncated record header", ErrFormat)
		}
		return nil, time.Time{}, err
	}
	sec, frac := rd.order.Uint32(h[0:]), rd.order.Uint32(h[4:])
	n := rd.order.Uint32(h[8:])
	if n > defaultSnapLen || (rd.snap != 0 && n > rd.snap) {
		return nil, time.Time{}, fmt.Errorf("%w: record of %d bytes", ErrFormat, n)
	}
	if cap(rd.buf) < int(n) {
		rd.buf = make([]byte, n)
	}
	rd.buf = rd.buf[:n]
	if _, err := io.ReadFull(rd.r, rd.buf); err != nil {
		return nil, time.Time{}, fmt.Errorf("%w: truncated record", ErrFormat)
	}
	rd.off += recordHdrLen + int64(n)
	if !rd.nanos {
		frac *= 1000
	}
	return rd.buf, time.Unix(int64(sec), int64(frac)), nil
}

// Offset is where the next record starts in the file: its size, once
// Next has returned io.EOF.
func (rd *Reader) Offset() int64 { return rd.off }

// Writer writes frames to a capture file with nanosecond timestamps.
type Writer struct {
	w   io.Writer
	hdr [recordHdrLen]byte
}

// NewWriter writes the file header and returns a Writer.
func NewWriter(w io.Writer) (*Writer, error) {
	var h [fileHeaderLen]byte
	binary.LittleEndian.PutUint32(h[0:], magicNanos)
	binary.LittleEndian.PutUint16(h[4:], 2)
	binary.LittleEndian.PutUint16(h[6:], 4)
	binary.LittleEndian.PutUint32(h[16:], defaultSnapLen)
	binary.LittleEndian.PutUint32(h[20:], linkEthernet)
	if _, err := w.Write(h[:]); err != nil {
		return nil, err
	}
	return &Writer{w: w}, nil
}

// WriteFrame appends one frame made of the concatenation of parts.
func (pw *Writer) WriteFrame(ts time.Time, parts ...[]byte) error {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	binary.LittleEndian.PutUint32(pw.hdr[0:], uint32(ts.Unix()))
	binary.LittleEndian.PutUint32(pw.hdr[4:], uint32(ts.Nanosecond()))
	binary.LittleEndian.PutUint32(pw.hdr[8:], uint32(n))
	binary.LittleEndian.PutUint32(pw.hdr[12:], uint32(n))
	if _, err := pw.w.Write(pw.hdr[:]); err != nil {
		return err
	}
	for _, p := range parts {
		if _, err := pw.w.Write(p); err != nil {
			return err
		}
	}
	return nil
}
