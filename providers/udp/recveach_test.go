package udp

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"vroce.dev/vroce"
)

// RecvEach delivers every datagram, in order: single packets each sent
// only after the one before arrived (the receiver parks after each
// without asking the kernel again, and must wake for the next), then
// bursts of coalesced runs. Close ends it with net.ErrClosed. Both
// readers: recvmmsg's and the portable one.
func TestRecvEachDeliversEveryBatch(t *testing.T) {
	for _, portable := range []bool{false, true} {
		t.Run(fmt.Sprintf("portable reader %v", portable), func(t *testing.T) {
			tx, rx := providerPair(t)
			if portable {
				rx.br = newXnetReader(rx.bc, max(batchSize, groBatch))
			}
			got := make(chan []byte, 1024)
			done := recvEach(rx, func(pkts []vroce.Packet) {
				for _, p := range pkts {
					if p.Addr != tx.LocalAddr() {
						t.Errorf("a packet from %v, want %v", p.Addr, tx.LocalAddr())
					}
					got <- bytes.Clone(p.Data) // lent until deliver returns
				}
			})
			expect := func(want []byte) {
				t.Helper()
				select {
				case b := <-got:
					if !bytes.Equal(b, want) {
						t.Fatalf("got %d bytes starting %v, want %d starting %v", len(b), b[:min(4, len(b))], len(want), want[:4])
					}
				case err := <-done:
					t.Fatalf("RecvEach ended: %v", err)
				case <-time.After(10 * time.Second):
					t.Fatalf("a packet of %d bytes starting %v never came", len(want), want[:4])
				}
			}
			packet := func(i, n int) []byte { return bytes.Repeat([]byte{byte(i), byte(i >> 8)}, n/2) }
			for i := range 50 {
				p := packet(i, 64)
				if err := tx.Send([]vroce.Packet{{Data: p, Addr: rx.LocalAddr()}}); err != nil {
					t.Fatal(err)
				}
				expect(p)
			}
			var burst []vroce.Packet
			for i := range 300 {
				burst = append(burst, vroce.Packet{Data: packet(i, 1000), Addr: rx.LocalAddr(), Coalesce: true})
			}
			for k := 0; k < len(burst); k += 50 {
				if err := tx.Send(burst[k : k+50]); err != nil {
					t.Fatal(err)
				}
			}
			for _, p := range burst {
				expect(p.Data)
			}
			closeAndWait(t, rx, done)
		})
	}
}

// recvEach runs rx.RecvEach in a goroutine, handing deliver each batch,
// and returns what it returns.
func recvEach(rx *Provider, deliver func([]vroce.Packet)) <-chan error {
	done := make(chan error, 1)
	go func() {
		pkts := make([]vroce.Packet, 8)
		for i := range pkts {
			pkts[i].Data = make([]byte, vroce.MaxPacketSize)
		}
		done <- rx.RecvEach(pkts, func(n int) bool { deliver(pkts[:n]); return true })
	}()
	return done
}

// closeAndWait closes rx and checks that its RecvEach ends with
// net.ErrClosed. (Close waits for the receive in progress, so it is
// called aside: a receive that never ends must fail the test, not hang
// it.)
func closeAndWait(t *testing.T, rx *Provider, done <-chan error) {
	t.Helper()
	go rx.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("RecvEach after Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not end RecvEach")
	}
}

// Close ends RecvEach even while datagrams keep arriving: the receive
// loop never has to wait in the poller, where a close is noticed.
func TestRecvEachEndsOnCloseUnderLoad(t *testing.T) {
	tx, rx := providerPair(t)
	delivered := make(chan struct{}, 1)
	done := recvEach(rx, func([]vroce.Packet) {
		select {
		case delivered <- struct{}{}:
		default:
		}
		// A slow consumer: the socket never runs dry, so every batch
		// is full and the loop never waits in the poller.
		time.Sleep(50 * time.Microsecond)
	})
	stop := make(chan struct{})
	flooded := make(chan struct{})
	go func() { // bursts of coalesced packets, until the test ends
		defer close(flooded)
		var burst []vroce.Packet
		for range 50 {
			burst = append(burst, vroce.Packet{Data: make([]byte, 200), Addr: rx.LocalAddr(), Coalesce: true})
		}
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := tx.Send(burst); err != nil {
				return
			}
		}
	}()
	defer func() { close(stop); <-flooded }()
	select {
	case <-delivered:
	case <-time.After(10 * time.Second):
		t.Fatal("nothing arrived")
	}
	closeAndWait(t, rx, done)
}

// Each RecvEach call (a device's waiter makes one per wait) sets up
// again only the receive headers the kernel wrote in the call before,
// when it receives into the same buffers. What the kernel wrote must not
// stay: a lone datagram leaves its header no room for control data, and
// a coalesced run received into that header next would lose the segment
// size that splits it (and a source address, the room for it).
func TestRecvEachCallsSetUpWhatTheKernelWrote(t *testing.T) {
	rx, err := Listen(":0") // both families
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rx.Close() })
	stuck := time.AfterFunc(10*time.Second, func() { rx.Close() }) // a datagram lost: RecvEach ends
	defer stuck.Stop()
	port := rx.LocalAddr().Port()
	var peers []*Provider
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0"} {
		p, err := Listen(addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		peers = append(peers, p)
	}
	pkts := make([]vroce.Packet, 8)
	for i := range 12 {
		from := peers[i%2]
		to := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port)
		if from.LocalAddr().Addr().Is6() {
			to = netip.AddrPortFrom(netip.IPv6Loopback(), port)
		}
		// A lone datagram, then a run of four sent as one (GSO) that
		// arrives as one (GRO), in turn.
		n := 1 + 3*(i%2)
		var run []vroce.Packet
		for k := range n {
			run = append(run, vroce.Packet{Data: bytes.Repeat([]byte{byte(i), byte(k)}, 50), Addr: to, Coalesce: true})
		}
		if err := from.Send(run); err != nil {
			t.Fatal(err)
		}
		for i := range pkts {
			pkts[i].Data = make([]byte, vroce.MaxPacketSize)
		}
		got := 0
		err := rx.RecvEach(pkts, func(m int) bool {
			for _, p := range pkts[:m] {
				if p.Addr != from.LocalAddr() {
					t.Errorf("call %d: a datagram from %v, want %v", i, p.Addr, from.LocalAddr())
				}
				if got < n && !bytes.Equal(p.Data, run[got].Data) {
					t.Errorf("call %d: packet %d is %d bytes starting %v, want %d starting %v", i, got, len(p.Data), p.Data[:2], len(run[got].Data), run[got].Data[:2])
				}
				got++
			}
			return got < n
		})
		if err != nil {
			t.Fatal(err)
		}
		if got != n {
			t.Fatalf("call %d: %d packets, want %d", i, got, n)
		}
	}
}
