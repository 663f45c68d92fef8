package workload

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"time"
)

// Stream is a stream workload. stream_bw writes Iters messages of Size
// bytes and waits for the reader's one-byte receipt; stream_lat
// ping-pongs Size bytes Iters times. With Verify every message carries
// its own pattern and is checked at the other end; without it the
// pattern is written once, since writing 64 KiB of pattern per message
// cost a fifth of the client's CPU, a cost no transport has.
type Stream struct {
	Test        string // "stream_bw" or "stream_lat"
	Size, Iters int
	Verify      bool
}

// Run is what a stream client measured.
type Run struct {
	Elapsed time.Duration
	Samples []time.Duration // stream_lat: each half round trip
	Marks   []Mark          // stream_bw: bytes written by a time, every 64 messages and at the receipt
}

// Mark is how many bytes had completed at a time into a run.
type Mark struct {
	At    time.Duration
	Bytes int64
}

// Client runs the client's side of s on conn.
func (s Stream) Client(conn io.ReadWriter) (Run, error) {
	var run Run
	buf := make([]byte, s.Size)
	Pattern(buf, 1)
	start := time.Now()
	if s.Test == "stream_lat" {
		run.Samples = make([]time.Duration, 0, s.Iters)
		for i := range s.Iters {
			if s.Verify {
				Pattern(buf, uint64(i))
			}
			t0 := time.Now()
			if _, err := conn.Write(buf); err != nil {
				return run, err
			}
			if _, err := io.ReadFull(conn, buf); err != nil {
				return run, err
			}
			run.Samples = append(run.Samples, time.Since(t0)/2)
			if s.Verify {
				if off, ok := CheckPattern(buf, uint64(i)); !ok {
					return run, fmt.Errorf("ping %d came back wrong at byte %d", i, off)
				}
			}
		}
		run.Elapsed = time.Since(start)
		return run, nil
	}
	for i := range s.Iters {
		if s.Verify {
			Pattern(buf, uint64(i))
		}
		if _, err := conn.Write(buf); err != nil {
			return run, err
		}
		if i%64 == 63 {
			run.Marks = append(run.Marks, Mark{time.Since(start), int64(i+1) * int64(s.Size)})
		}
	}
	var receipt [1]byte
	if _, err := io.ReadFull(conn, receipt[:]); err != nil {
		return run, fmt.Errorf("receipt: %w", err)
	}
	if receipt[0] != 1 {
		return run, errors.New("the server found the data wrong")
	}
	run.Elapsed = time.Since(start)
	run.Marks = append(run.Marks, Mark{run.Elapsed, int64(s.Iters) * int64(s.Size)})
	return run, nil
}

// Server runs the server's side of s on conn.
func (s Stream) Server(conn io.ReadWriter) error {
	buf := make([]byte, s.Size)
	if s.Test == "stream_lat" {
		for range s.Iters {
			if _, err := io.ReadFull(conn, buf); err != nil {
				return err
			}
			if _, err := conn.Write(buf); err != nil {
				return err
			}
		}
		return nil
	}
	ok := byte(1)
	for i := range s.Iters {
		if _, err := io.ReadFull(conn, buf); err != nil {
			return err
		}
		if s.Verify {
			if _, good := CheckPattern(buf, uint64(i)); !good {
				ok = 2
			}
		}
	}
	_, err := conn.Write([]byte{ok})
	return err
}

// Pattern fills b with the words of message i: each 8 bytes hold i and
// their offset, so a misplaced, stale or corrupted byte shows. Whole
// words are stored directly: a word copied through a scratch array cost
// a verified write_bw a fifth of its client's CPU.
func Pattern(b []byte, i uint64) {
	off := 0
	for ; off+8 <= len(b); off += 8 {
		binary.LittleEndian.PutUint64(b[off:], patternWord(i, off))
	}
	if off < len(b) {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], patternWord(i, off))
		copy(b[off:], w[:])
	}
}

// CheckPattern reports the first offset where b is not message i.
func CheckPattern(b []byte, i uint64) (int, bool) {
	off := 0
	for ; off+8 <= len(b); off += 8 {
		if binary.LittleEndian.Uint64(b[off:]) != patternWord(i, off) {
			return off, false
		}
	}
	if off < len(b) {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], patternWord(i, off))
		if string(b[off:]) != string(w[:len(b)-off]) {
			return off, false
		}
	}
	return 0, true
}

// patternWord is the word at offset off of message i.
func patternWord(i uint64, off int) uint64 { return i<<32 ^ uint64(off) ^ 0x5bd1e995 }

// Latency summarises samples in microseconds, as perftest prints them:
// Typical is the median.
type Latency struct {
	Min, Max, Typical, Avg, Stdev, P99, P999 float64
}

// Summarize summarises samples; all zero when there are none.
func Summarize(samples []time.Duration) Latency {
	var l Latency
	n := len(samples)
	if n == 0 {
		return l
	}
	us := make([]float64, n)
	sum := 0.0
	for i, s := range samples {
		us[i] = float64(s) / float64(time.Microsecond)
		sum += us[i]
	}
	slices.Sort(us)
	l.Min, l.Max, l.Typical = us[0], us[n-1], us[n/2]
	l.Avg = sum / float64(n)
	v := 0.0
	for _, x := range us {
		v += (x - l.Avg) * (x - l.Avg)
	}
	l.Stdev = math.Sqrt(v / float64(n))
	l.P99 = us[min(n-1, n*99/100)]
	l.P999 = us[min(n-1, n*999/1000)]
	return l
}

// CPUPerGiB is cpu in seconds per GiB of moved bytes; 0 when either is
// unknown.
func CPUPerGiB(cpu time.Duration, moved float64) float64 {
	if cpu <= 0 || moved <= 0 {
		return 0
	}
	return cpu.Seconds() / (moved / (1 << 30))
}
