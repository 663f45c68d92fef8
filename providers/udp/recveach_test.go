package udp

import (
	"bytes"
	"errors"
	"fmt"
	"net"
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
