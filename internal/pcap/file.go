package pcap

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// Datagram is a UDP datagram read from a capture file, with the number
// of its frame (from 1), where its record starts in the file, when it was
// captured, and the whole frame, its bytes copied out of the reader.
type Datagram struct {
	Frame  int
	Offset int64
	Time   time.Time
	Raw    []byte
	UDPDatagram
}

// ReadUDP reads the capture at path and returns its UDP datagrams,
// skipping every other frame.
func ReadUDP(path string) ([]Datagram, error) { return ReadUDPFrom(path, 0) }

// ReadUDPFrom is ReadUDP from the record that starts at offset in the
// file, skipping those before it without reading them: offset must be
// where a record starts, such as the file's size taken between two
// writes of whole records. An offset at or before the first record
// reads the whole file. Frames are numbered from the first one read.
func ReadUDPFrom(path string, offset int64) ([]Datagram, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var hdr [fileHeaderLen]byte
	if _, err := io.ReadFull(f, hdr[:]); err != nil {
		return nil, fmt.Errorf("%s: %w: file header: %v", path, ErrFormat, err)
	}
	start := max(offset, fileHeaderLen)
	r, err := NewReader(io.MultiReader(bytes.NewReader(hdr[:]), io.NewSectionReader(f, start, 1<<62)))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	r.off = start
	var out []Datagram
	for n := 1; ; n++ {
		at := r.Offset()
		frame, ts, err := r.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s frame %d: %w", path, n, err)
		}
		if _, ok := DecodeUDP(frame); !ok {
			continue
		}
		raw := bytes.Clone(frame)
		d, _ := DecodeUDP(raw) // the same datagram, in the copy
		out = append(out, Datagram{Frame: n, Offset: at, Time: ts, Raw: raw, UDPDatagram: d})
	}
}
