package vroce_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"vroce.dev/internal/testkit/verbstest"
	"vroce.dev/providers/sim"
	"vroce.dev/vroce"
)

// benchPair is a selective-repeat pair on a sim network with cfg, 4 KiB MTU.
func benchPair(b *testing.B, cfg sim.Config) (*node, *node, *sim.Network) {
	o := defaultOpts()
	o.Sim = cfg
	o.MTU = vroce.MTU4096
	o.BufSize = 4 << 20
	return simPair(b, o)
}

// writeStream keeps depth 64 KiB WRITEs in flight until n complete.
func writeStream(b *testing.B, a, peer *node, qp *vroce.QP, n int) {
	const size, depth = 65536, 32
	wc := make([]vroce.WorkCompletion, depth)
	posted, done := 0, 0
	for done < n {
		for posted < n && posted-done < depth {
			off := (posted % depth) * size
			if err := qp.PostSend(vroce.SendWR{Opcode: vroce.WRRDMAWrite, Flags: vroce.SendSignaled,
				SGL: []vroce.SGE{a.MR.SGE(off, size)}, RemoteAddr: peer.MR.Addr() + uint64(off), RKey: peer.MR.RKey()}); err != nil {
				b.Fatal(err)
			}
			posted++
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		k, err := a.CQ.PollWait(ctx, wc)
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		mustSucceed(b, wc[:k])
		done += k
	}
}

// BenchmarkWriteGoodputUnderLoss: 64 KiB WRITEs over the sim with random
// loss. Compare the MB/s of the lossy runs with the lossless one.
func BenchmarkWriteGoodputUnderLoss(b *testing.B) {
	for _, loss := range []float64{0, 0.01, 0.05} {
		b.Run(fmt.Sprintf("loss=%g", loss), func(b *testing.B) {
			a, peer, _ := benchPair(b, sim.Config{Seed: 1, Loss: loss})
			b.SetBytes(65536)
			b.ResetTimer()
			writeStream(b, a, peer, a.QP, b.N)
			b.StopTimer()
			s := a.QP.Stats()
			b.ReportMetric(float64(s.Retransmits)/float64(b.N), "retx/op")
		})
	}
}

// BenchmarkSendLatencyUnderLoss: 64-byte SEND ping-pong; p50 and p99 of
// the round trip, lossless and with 1% loss.
func BenchmarkSendLatencyUnderLoss(b *testing.B) {
	for _, loss := range []float64{0, 0.01} {
		b.Run(fmt.Sprintf("loss=%g", loss), func(b *testing.B) {
			a, peer, _ := benchPair(b, sim.Config{Seed: 1, Loss: loss})
			post := func(n *node) {
				if err := n.QP.PostRecv(vroce.RecvWR{SGL: []vroce.SGE{n.MR.SGE(0, 64)}}); err != nil {
					b.Fatal(err)
				}
			}
			post(a)
			post(peer)
			errc := make(chan error, 1)
			go func() { // the peer answers every ping
				for i := 0; i < b.N; i++ {
					if _, err := waitOne(peer); err != nil {
						errc <- err
						return
					}
					post(peer)
					if err := peer.QP.PostSend(vroce.SendWR{Opcode: vroce.WRSend, Flags: vroce.SendInline, Inline: make([]byte, 64)}); err != nil {
						errc <- err
						return
					}
				}
				errc <- nil
			}()
			rtts := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				if err := a.QP.PostSend(vroce.SendWR{Opcode: vroce.WRSend, Flags: vroce.SendInline, Inline: make([]byte, 64)}); err != nil {
					b.Fatal(err)
				}
				if _, err := waitOne(a); err != nil {
					b.Fatal(err)
				}
				rtts = append(rtts, time.Since(t0))
				post(a)
			}
			b.StopTimer()
			if err := <-errc; err != nil {
				b.Fatal(err)
			}
			slices.Sort(rtts)
			b.ReportMetric(float64(rtts[len(rtts)/2].Microseconds()), "p50-us")
			b.ReportMetric(float64(rtts[len(rtts)*99/100].Microseconds()), "p99-us")
		})
	}
}

// waitOne waits up to 30 seconds for one receive completion, skipping
// send completions.
func waitOne(n *node) (vroce.WorkCompletion, error) {
	wc := make([]vroce.WorkCompletion, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := verbstest.AwaitRecv(ctx, n, wc)
	return wc[0], err
}

// BenchmarkTwoQPsShareARateLimitedLink: two QPs write at once into one
// device whose incoming link carries 200 MB/s with a 256 KiB queue; each
// QP's share of the messages completed while both were sending.
func BenchmarkTwoQPsShareARateLimitedLink(b *testing.B) {
	network := sim.NewNetwork(sim.Config{Seed: 1, Rate: 200e6, QueueBytes: 256 << 10})
	b.Cleanup(network.Close)
	da := verbstest.OpenDevice(b, vroce.Config{Provider: "sim", Addr: "127.0.0.1:9100", ProviderOptions: network})
	db := verbstest.OpenDevice(b, vroce.Config{Provider: "sim", Addr: "127.0.0.2:9100", ProviderOptions: network})
	o := defaultOpts()
	o.MTU = vroce.MTU4096
	o.BufSize = 4 << 20
	var pairs [2][2]*node
	for i := range pairs {
		pairs[i][0], pairs[i][1] = verbstest.Pair(b, da, db, o)
	}
	total := int64(2 * b.N)
	var completed sync.Mutex
	counts := [2]int64{}
	done := func() bool {
		completed.Lock()
		defer completed.Unlock()
		return counts[0]+counts[1] >= total
	}
	b.SetBytes(65536)
	b.ResetTimer()
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for i := range pairs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, peer := pairs[i][0], pairs[i][1]
			const size, depth = 65536, 16
			wc := make([]vroce.WorkCompletion, depth)
			inFlight := 0
			for k := 0; ; {
				for !done() && inFlight < depth {
					off := (k % depth) * size
					if err := a.QP.PostSend(vroce.SendWR{Opcode: vroce.WRRDMAWrite, Flags: vroce.SendSignaled,
						SGL: []vroce.SGE{a.MR.SGE(off, size)}, RemoteAddr: peer.MR.Addr() + uint64(off), RKey: peer.MR.RKey()}); err != nil {
						errs <- err
						return
					}
					k++
					inFlight++
				}
				if inFlight == 0 {
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				n, err := a.CQ.PollWait(ctx, wc)
				cancel()
				if err != nil {
					errs <- err
					return
				}
				inFlight -= n
				completed.Lock()
				counts[i] += int64(n)
				completed.Unlock()
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	sum := float64(counts[0] + counts[1])
	b.ReportMetric(float64(counts[0])/sum, "qp1-share")
	b.ReportMetric(float64(counts[1])/sum, "qp2-share")
}
