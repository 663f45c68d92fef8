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
func ReadUDP(path string) ([]Datagram, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r, err := NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
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
