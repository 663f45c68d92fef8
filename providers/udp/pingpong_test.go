package udp

import (
	"slices"
	"testing"
	"time"

	"vroce.dev/vroce"
)

// BenchmarkPingPong64 is the provider alone, without a device: a 90-byte
// datagram (a 64-byte SEND with its headers) to an echoing provider and
// back. It reports the median half round trip, the figure vroce-perf's
// _lat tests print, so that a change to the provider can be measured
// without the rest of the stack.
//
// handoff receives as a device does, with RecvEach on a goroutine of its
// own that hands each arrival over a channel to the goroutine waiting for
// it; direct has the waiting goroutine call Recv itself. The difference
// is what the device's receive goroutine costs a request-reply exchange.
//
//	go test -run '^$' -bench PingPong64 -benchtime 40000x ./providers/udp
func BenchmarkPingPong64(b *testing.B) {
	for _, handoff := range []bool{true, false} {
		name := "direct"
		if handoff {
			name = "handoff"
		}
		b.Run(name, func(b *testing.B) { pingPong(b, handoff) })
	}
}

func pingPong(b *testing.B, handoff bool) {
	tx, echo := providerPair(b)
	recvEach(echo, func(pkts []vroce.Packet) {
		for i := range pkts {
			pkts[i].Addr = tx.LocalAddr()
		}
		echo.Send(pkts)
	})
	in := make([]vroce.Packet, 8)
	bufs := make([][]byte, len(in))
	for i := range bufs {
		bufs[i] = make([]byte, vroce.MaxPacketSize)
	}
	wait := func() {
		for i := range in {
			in[i].Data = bufs[i] // Recv may have lent its own
		}
		if _, err := tx.Recv(in); err != nil {
			b.Fatal(err)
		}
	}
	if handoff {
		got := make(chan struct{}, 1)
		recvEach(tx, func([]vroce.Packet) { got <- struct{}{} })
		wait = func() { <-got }
	}
	msg := []vroce.Packet{{Data: make([]byte, 90), Addr: echo.LocalAddr()}}
	var half []time.Duration
	for b.Loop() {
		start := time.Now()
		if err := tx.Send(msg); err != nil {
			b.Fatal(err)
		}
		wait()
		half = append(half, time.Since(start)/2)
	}
	slices.Sort(half)
	b.ReportMetric(float64(half[len(half)/2])/1e3, "p50-half-rtt-us")
}
