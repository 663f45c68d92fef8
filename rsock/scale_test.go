package rsock

import (
	"context"
	"flag"
	"net"
	"runtime"
	"sync"
	"testing"
)

var idleStreams = flag.Int("idle-streams", 1000, "streams for TestIdleStreamMemory (10000 for the full run)")

// TestIdleStreamMemory opens many idle streams between two listeners'
// devices in this process and measures what each costs, both ends
// together, SRQ buffers included: the Go heap's growth per stream. The
// target is under 16 KiB.
func TestIdleStreamMemory(t *testing.T) {
	for _, mode := range []string{ModeSocket, ModeCM} {
		t.Run(mode, func(t *testing.T) {
			n := *idleStreams
			l := listen(t, &ListenConfig{Mode: mode, Backlog: 4096}, "127.0.0.1:0")
			// One stream first, so both devices exist before the baseline.
			c0, s0 := pair(t, l, &Dialer{Mode: mode})
			before := heap()
			clients := make([]net.Conn, 0, n)
			servers := make([]net.Conn, 0, n)
			var mu sync.Mutex
			done := make(chan struct{})
			go func() {
				defer close(done)
				for len(servers) < n {
					c, err := l.Accept()
					if err != nil {
						return
					}
					mu.Lock()
					servers = append(servers, c)
					mu.Unlock()
				}
			}()
			var wg sync.WaitGroup
			sem := make(chan struct{}, 64)
			var cmu sync.Mutex
			for range n {
				sem <- struct{}{}
				wg.Go(func() {
					defer func() { <-sem }()
					c, err := (&Dialer{Mode: mode}).DialContext(context.Background(), "tcp", l.Addr().String())
					if err != nil {
						t.Error(err)
						return
					}
					if transport(c) != "vroce" {
						t.Errorf("transport %s", transport(c))
					}
					cmu.Lock()
					clients = append(clients, c)
					cmu.Unlock()
				})
			}
			wg.Wait()
			<-done
			if t.Failed() {
				t.FailNow()
			}
			per := float64(heap()-before) / float64(n)
			t.Logf("%d idle %s streams: %.0f bytes of heap each, both ends together", n, mode, per)
			if per > 16<<10 {
				t.Errorf("an idle stream costs %.0f bytes, over the 16 KiB target", per)
			}
			// The last streams opened still carry data.
			if _, err := servers[n-1].Write([]byte("x")); err != nil {
				t.Fatal(err)
			}
			for _, c := range append(clients, servers...) {
				c.Close()
			}
			c0.Close()
			s0.Close()
			l.Close()
			settle(t)
		})
	}
}

// heap is the live heap: two collections, since sync.Pool keeps what
// it drops for one more.
func heap() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}
