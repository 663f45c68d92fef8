package sim_test

import (
	"fmt"
	"math"
	"net/netip"
	"testing"
	"time"

	"go.uber.org/goleak"

	"vroce.dev/providers/sim"
	"vroce.dev/vroce"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var (
	addrA = netip.MustParseAddrPort("127.0.0.1:4791")
	addrB = netip.MustParseAddrPort("127.0.0.2:4791")
)

// run sends n numbered packets A->B and returns the sequence numbers B
// received, in arrival order.
func run(t *testing.T, cfg sim.Config, n int) ([]int, sim.Stats) {
	t.Helper()
	network := sim.NewNetwork(cfg)
	defer network.Close()
	a, err := network.Attach(addrA)
	if err != nil {
		t.Fatal(err)
	}
	b, err := network.Attach(addrB)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if err := a.Send([]vroce.Packet{{Data: []byte(fmt.Sprintf("%08d", i)), Addr: addrB}}); err != nil {
			t.Fatal(err)
		}
	}
	// Everything sent is delivered or counted as dropped: wait for the
	// counters to add up, then drain.
	deadline := time.Now().Add(5 * time.Second)
	for {
		s := network.Stats()
		if s.Delivered+s.Lost+s.QueueDrops+s.Partitioned >= s.Sent+s.Duplicated {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("packets still in flight: %+v", s)
		}
		time.Sleep(100 * time.Microsecond)
	}
	var got []int
	bufs := make([]vroce.Packet, 64)
	for {
		s := network.Stats()
		if uint64(len(got)) == s.Delivered {
			return got, s
		}
		for i := range bufs {
			bufs[i].Data = make([]byte, 64)
		}
		k, err := b.Recv(bufs)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range bufs[:k] {
			if p.Addr != addrA {
				t.Fatalf("source %v", p.Addr)
			}
			var seq int
			fmt.Sscanf(string(p.Data), "%d", &seq)
			got = append(got, seq)
		}
	}
}

func TestFaultsAreSeededAndReproducible(t *testing.T) {
	cfg := sim.Config{Seed: 3, Loss: 0.1, Duplicate: 0.05}
	first, s1 := run(t, cfg, 2000)
	second, s2 := run(t, cfg, 2000)
	if fmt.Sprint(first) != fmt.Sprint(second) || s1 != s2 {
		t.Fatal("the same seed gave different fault decisions")
	}
	if lossRate := float64(s1.Lost) / 2000; math.Abs(lossRate-0.1) > 0.03 {
		t.Fatalf("loss rate %.3f for a configured 0.1", lossRate)
	}
	if s1.Duplicated == 0 || len(first) != int(2000-s1.Lost+s1.Duplicated) {
		t.Fatalf("duplicates %d, delivered %d", s1.Duplicated, len(first))
	}
	other, _ := run(t, sim.Config{Seed: 4, Loss: 0.1}, 2000)
	if fmt.Sprint(first) == fmt.Sprint(other) {
		t.Fatal("a different seed gave the same decisions")
	}
}

func TestReorderingLetsLaterPacketsOvertake(t *testing.T) {
	got, s := run(t, sim.Config{Seed: 1, Reorder: 0.2, Delay: 20 * time.Microsecond}, 500)
	if s.Reordered == 0 || len(got) != 500 {
		t.Fatalf("stats %+v, %d delivered", s, len(got))
	}
	inversions := 0
	for i := 1; i < len(got); i++ {
		if got[i] < got[i-1] {
			inversions++
		}
	}
	if inversions == 0 {
		t.Fatal("no packet overtook another")
	}
}

func TestCorruptionFlipsABit(t *testing.T) {
	network := sim.NewNetwork(sim.Config{Seed: 9, Corrupt: 1})
	defer network.Close()
	a, _ := network.Attach(addrA)
	b, _ := network.Attach(addrB)
	sent := []byte("0123456789abcdef")
	a.Send([]vroce.Packet{{Data: sent, Addr: addrB}})
	pkts := []vroce.Packet{{Data: make([]byte, 64)}}
	if _, err := b.Recv(pkts); err != nil {
		t.Fatal(err)
	}
	diff := 0
	for i := range sent {
		for x := sent[i] ^ pkts[0].Data[i]; x != 0; x &= x - 1 {
			diff++
		}
	}
	if diff != 1 {
		t.Fatalf("%d bits differ, want 1", diff)
	}
}

func TestPartitionAndHeal(t *testing.T) {
	network := sim.NewNetwork(sim.Config{})
	defer network.Close()
	a, _ := network.Attach(addrA)
	b, _ := network.Attach(addrB)
	network.Partition(addrA.Addr(), addrB.Addr())
	a.Send([]vroce.Packet{{Data: []byte("lost"), Addr: addrB}})
	network.Heal()
	a.Send([]vroce.Packet{{Data: []byte("kept"), Addr: addrB}})
	pkts := []vroce.Packet{{Data: make([]byte, 64)}, {Data: make([]byte, 64)}}
	n, err := b.Recv(pkts)
	if err != nil || n != 1 || string(pkts[0].Data) != "kept" {
		t.Fatalf("received %d packets (%q), err %v", n, pkts[0].Data, err)
	}
	if s := network.Stats(); s.Partitioned != 1 {
		t.Fatalf("stats %+v", s)
	}
}

func TestRateLimitQueuesThenDrops(t *testing.T) {
	// 1 kB/s with an 80-byte queue: each 8-byte packet holds the link for
	// 8 ms, so of 100 sent at once about 10 fit the queue and the rest drop
	// (a sender slow enough to drain more would need milliseconds per
	// packet).
	got, s := run(t, sim.Config{Rate: 1e3, QueueBytes: 80}, 100)
	if s.QueueDrops < 80 || s.QueueDrops > 90 || len(got) != int(100-s.QueueDrops) {
		t.Fatalf("queue drops %d, delivered %d", s.QueueDrops, len(got))
	}
	for i := 1; i < len(got); i++ {
		if got[i] <= got[i-1] {
			t.Fatalf("a rate-limited link reordered: %v", got)
		}
	}
}

func TestAttachRefusesATakenAddress(t *testing.T) {
	network := sim.NewNetwork(sim.Config{})
	defer network.Close()
	if _, err := network.Attach(addrA); err != nil {
		t.Fatal(err)
	}
	if _, err := network.Attach(addrA); err == nil {
		t.Fatal("two endpoints at one address")
	}
	auto, err := network.Attach(netip.AddrPort{})
	if err != nil || !auto.LocalAddr().Addr().IsLoopback() {
		t.Fatalf("automatic address %v, %v", auto.LocalAddr(), err)
	}
}

func TestDropNextDropsExactlyThat(t *testing.T) {
	network := sim.NewNetwork(sim.Config{})
	defer network.Close()
	a, _ := network.Attach(addrA)
	b, _ := network.Attach(addrB)
	network.DropNext(addrB, 5) // another sender's drops do not apply
	network.DropNext(addrA, 2)
	for _, m := range []string{"one", "two", "three"} {
		a.Send([]vroce.Packet{{Data: []byte(m), Addr: addrB}})
	}
	pkts := []vroce.Packet{{Data: make([]byte, 64)}, {Data: make([]byte, 64)}}
	if n, err := b.Recv(pkts); err != nil || n != 1 || string(pkts[0].Data) != "three" {
		t.Fatalf("received %d (%q), %v", n, pkts[0].Data, err)
	}
}

func TestDeliveringAPacketAllocatesNothing(t *testing.T) {
	network := sim.NewNetwork(sim.Config{})
	defer network.Close()
	a, _ := network.Attach(addrA)
	b, _ := network.Attach(addrB)
	out := []vroce.Packet{{Data: make([]byte, 1024), Addr: addrB}}
	in := []vroce.Packet{{Data: make([]byte, vroce.MaxPacketSize)}}
	allocs := testing.AllocsPerRun(200, func() {
		if err := a.Send(out); err != nil {
			t.Fatal(err)
		}
		in[0].Data = in[0].Data[:cap(in[0].Data)]
		if n, err := b.Recv(in); n != 1 || err != nil {
			t.Fatal(n, err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%.1f allocations per packet", allocs)
	}
}
