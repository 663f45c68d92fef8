package udp

import (
	"slices"
	"testing"
	"time"

	"vroce.dev/vroce"
)

// BenchmarkPingPong64 is the provider alone, without a device: a 90-byte
// datagram (a 64-byte SEND with its headers) to an echoing provider and
// back, received with RecvEach and handed to the waiting goroutine over a
// channel, as a device hands a completion. It reports the median half
// round trip, the figure vroce-perf's _lat tests print, so that a change
// to the provider can be measured without the rest of the stack.
//
//	go test -run '^$' -bench PingPong64 -benchtime 40000x ./providers/udp
func BenchmarkPingPong64(b *testing.B) {
	tx, echo := providerPair(b)
	recvEach(echo, func(pkts []vroce.Packet) {
		for i := range pkts {
			pkts[i].Addr = tx.LocalAddr()
		}
		echo.Send(pkts)
	})
	got := make(chan struct{}, 1)
	recvEach(tx, func([]vroce.Packet) { got <- struct{}{} })
	msg := []vroce.Packet{{Data: make([]byte, 90), Addr: echo.LocalAddr()}}
	half := make([]time.Duration, 0, b.N)
	for b.Loop() {
		start := time.Now()
		if err := tx.Send(msg); err != nil {
			b.Fatal(err)
		}
		<-got
		half = append(half, time.Since(start)/2)
	}
	slices.Sort(half)
	b.ReportMetric(float64(half[len(half)/2])/1e3, "p50-half-rtt-us")
}
