package rsock

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// benchPair connects a stream over vRoCE, or over kernel TCP, for the
// same benchmark to run on both in one run.
func benchPair(b testing.TB, overVRoCE bool) (client, server net.Conn, done func()) {
	var l net.Listener
	var err error
	if overVRoCE {
		l, err = Listen("tcp", "127.0.0.1:0")
	} else {
		l, err = net.Listen("tcp", "127.0.0.1:0")
	}
	if err != nil {
		b.Fatal(err)
	}
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := l.Accept()
		accepted <- c
	}()
	if overVRoCE {
		client, err = (&Dialer{NoFallback: true}).Dial("tcp", l.Addr().String())
	} else {
		client, err = net.Dial("tcp", l.Addr().String())
	}
	if err != nil {
		b.Fatal(err)
	}
	server = <-accepted
	return client, server, func() {
		client.Close()
		server.Close()
		l.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		Drain(ctx)
	}
}

// BenchmarkStreamWrite64K: one stream, 64 KiB writes, a reader draining;
// vroce and tcp in the same run.
func BenchmarkStreamWrite64K(b *testing.B) {
	onBoth(b, func(b *testing.B, c, s net.Conn) {
		buf := make([]byte, 64<<10)
		read := make(chan error, 1)
		go func() {
			_, err := io.CopyN(io.Discard, s, int64(b.N)*int64(len(buf)))
			if err == nil {
				_, err = s.Write([]byte{1})
			}
			read <- err
		}()
		b.SetBytes(int64(len(buf)))
		b.ResetTimer()
		for range b.N {
			if _, err := c.Write(buf); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := io.ReadFull(c, buf[:1]); err != nil {
			b.Fatal(err)
		}
		if err := <-read; err != nil {
			b.Fatal(err)
		}
	})
}

// BenchmarkStreamPingPong64: 64-byte ping-pongs; ns/op is the round trip.
func BenchmarkStreamPingPong64(b *testing.B) {
	onBoth(b, func(b *testing.B, c, s net.Conn) {
		go func() {
			buf := make([]byte, 64)
			for {
				if _, err := io.ReadFull(s, buf); err != nil {
					return
				}
				if _, err := s.Write(buf); err != nil {
					return
				}
			}
		}()
		buf := make([]byte, 64)
		b.ResetTimer()
		for range b.N {
			if _, err := c.Write(buf); err != nil {
				b.Fatal(err)
			}
			if _, err := io.ReadFull(c, buf); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// onBoth runs a benchmark over a vRoCE stream, then over kernel TCP, in
// the same run.
func onBoth(b *testing.B, bench func(b *testing.B, client, server net.Conn)) {
	for _, t := range []struct {
		name  string
		vroce bool
	}{{"vroce", true}, {"tcp", false}} {
		b.Run(t.name, func(b *testing.B) {
			c, s, done := benchPair(b, t.vroce)
			bench(b, c, s)
			b.StopTimer() // closing waits out the QPs' TIME_WAIT: not the workload
			done()
		})
	}
}

// BenchmarkManyBulkStreams writes 64 KiB messages over many streams at
// once between two stacks on loopback, and reports the goodput, the
// sending side's retransmissions and timeouts, and how often its QPs
// stopped for the peer budget (what they keep in flight together). The
// 2,000 streams need about 6,000 descriptors:
//
//	go test -run XXX -bench ManyBulkStreams -benchtime 20x ./rsock/
func BenchmarkManyBulkStreams(b *testing.B) {
	for _, n := range []int{2, 32, 200, 2000} {
		b.Run(fmt.Sprintf("streams=%d", n), func(b *testing.B) {
			l, err := (&ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			var received atomic.Int64
			var readers sync.WaitGroup
			clients := make([]net.Conn, 0, n)
			var servers []net.Conn
			for range n {
				c, s := pair(b, l, &Dialer{})
				clients, servers = append(clients, c), append(servers, s)
				readers.Go(func() {
					k, _ := io.Copy(io.Discard, s)
					received.Add(k)
				})
			}
			msg := make([]byte, 64<<10)
			per := max(b.N*256/n, 1) // messages per stream: 16 MiB per b.N
			b.ResetTimer()
			start := time.Now()
			var writers sync.WaitGroup
			for _, c := range clients {
				writers.Go(func() {
					for range per {
						if _, err := c.Write(msg); err != nil {
							return
						}
					}
					c.(*Conn).CloseWrite()
				})
			}
			writers.Wait()
			readers.Wait()
			el := time.Since(start)
			b.StopTimer()
			if want := int64(per * n * len(msg)); received.Load() != want {
				b.Fatalf("received %d bytes of %d", received.Load(), want)
			}
			var retx, timeouts, stops uint64
			for _, c := range clients {
				st := c.(*Conn).s.qp.Stats()
				retx, timeouts, stops = retx+st.Retransmits, timeouts+st.Timeouts, stops+st.PeerBudgetStops
			}
			b.ReportMetric(float64(received.Load())/el.Seconds()/(1<<20), "MiB/s")
			b.ReportMetric(float64(retx), "retransmits")
			b.ReportMetric(float64(timeouts), "timeouts")
			b.ReportMetric(float64(stops), "budget-stops")
			for _, c := range append(clients, servers...) {
				c.Close()
			}
			l.Close()
			settle(b)
		})
	}
}
