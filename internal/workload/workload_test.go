package workload

import (
	"math"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A damaged byte is found at the offset it is at, and only there.
func TestCheckPatternFindsTheDamagedWord(t *testing.T) {
	b := make([]byte, 100)
	Pattern(b, 7)
	if _, ok := CheckPattern(b, 7); !ok {
		t.Fatal("an intact message fails the check")
	}
	if _, ok := CheckPattern(b, 8); ok {
		t.Fatal("message 7 passes as message 8")
	}
	b[97] ^= 1
	if off, ok := CheckPattern(b, 7); ok || off != 96 {
		t.Fatalf("byte 97 damaged: got offset %d, ok %v; want 96", off, ok)
	}
	b[97] ^= 1
	b[42] ^= 0x80
	if off, ok := CheckPattern(b, 7); ok || off != 40 {
		t.Fatalf("byte 42 damaged: got offset %d, ok %v; want 40", off, ok)
	}
}

// What a verified 64 KiB message costs each end beyond the transport.
func BenchmarkPattern64K(b *testing.B) {
	buf := make([]byte, 64<<10)
	b.SetBytes(int64(len(buf)))
	for i := range b.N {
		Pattern(buf, uint64(i))
		if _, ok := CheckPattern(buf, uint64(i)); !ok {
			b.Fatal("the pattern just written fails its check")
		}
	}
}

// Both workloads run end to end, checked, over an in-memory pipe.
func TestStreamsRunOverAPipe(t *testing.T) {
	for _, test := range []string{"stream_bw", "stream_lat"} {
		s := Stream{Test: test, Size: 1000, Iters: 130, Verify: true}
		c, d := net.Pipe()
		served := make(chan error, 1)
		go func() { served <- s.Server(d) }()
		run, err := s.Client(c)
		c.Close()
		if err != nil || <-served != nil {
			t.Fatalf("%s: %v", test, err)
		}
		switch {
		case test == "stream_lat" && len(run.Samples) != 130:
			t.Errorf("stream_lat: %d samples, want 130", len(run.Samples))
		case test == "stream_bw" && (len(run.Marks) != 3 || run.Marks[2].Bytes != 130_000):
			t.Errorf("stream_bw: marks %+v, want at 64, 128 and all 130 messages", run.Marks)
		}
	}
}

// flipper damages the byte at offset at of what is written through it.
type flipper struct {
	net.Conn
	at, seen int
}

func (f *flipper) Write(p []byte) (int, error) {
	q := append([]byte(nil), p...)
	if i := f.at - f.seen; i >= 0 && i < len(q) {
		q[i] ^= 0x40
	}
	f.seen += len(q)
	return f.Conn.Write(q)
}

// A byte damaged on the way fails a checked run: stream_bw by the
// server's receipt, stream_lat at the client.
func TestDamageFailsACheckedRun(t *testing.T) {
	for _, test := range []string{"stream_bw", "stream_lat"} {
		s := Stream{Test: test, Size: 100, Iters: 5, Verify: true}
		c, d := net.Pipe()
		served := make(chan error, 1)
		go func() { served <- s.Server(d); d.Close() }()
		_, err := s.Client(&flipper{Conn: c, at: 321})
		c.Close()
		<-served
		if err == nil || !strings.Contains(err.Error(), "wrong") {
			t.Errorf("%s: byte 321 damaged: got %v, want the data found wrong", test, err)
		}
	}
}

// The summary is perftest's: the median as typical, the 99th and 99.9th
// percentiles by rank.
func TestSummarize(t *testing.T) {
	var samples []time.Duration
	for i := 100; i >= 1; i-- { // out of order: Summarize sorts
		samples = append(samples, time.Duration(i)*time.Microsecond)
	}
	l := Summarize(samples)
	if l.Min != 1 || l.Max != 100 || l.Typical != 51 || l.Avg != 50.5 || l.P99 != 100 || l.P999 != 100 {
		t.Fatalf("1-100 µs: %+v", l)
	}
	if s := math.Sqrt(833.25); math.Abs(l.Stdev-s) > 1e-9 {
		t.Fatalf("stdev %v, want %v", l.Stdev, s)
	}
	if (Summarize(nil) != Latency{}) {
		t.Fatal("no samples: a summary not zero")
	}
	if got := CPUPerGiB(2*time.Second, 1<<30); got != 2 {
		t.Fatalf("2 s for 1 GiB: %v s per GiB", got)
	}
	if CPUPerGiB(0, 1<<30) != 0 || CPUPerGiB(time.Second, 0) != 0 {
		t.Fatal("an unknown CPU time or nothing moved gave a figure")
	}
}
