package udp

import (
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"vroce.dev/vroce"
)

// With BusyPoll a receive that finds nothing keeps trying, then sleeps in
// the poller; a packet is received either way, and Close ends it.
func TestBusyPollTriesThenSleeps(t *testing.T) {
	if _, err := ListenWith("127.0.0.1:0", Options{BusyPoll: time.Second}); err == nil {
		t.Fatal("a busy period of a second was accepted")
	}
	rx, err := ListenWith("127.0.0.1:0", Options{BusyPoll: 500 * time.Microsecond})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	m, ok := rx.br.(*mmsgReader)
	if !ok {
		t.Skipf("the provider receives through %T, which does not busy-poll", rx.br)
	}
	type result struct {
		n   int
		err error
	}
	recv := func() chan result {
		c := make(chan result, 1)
		go func() {
			in := []vroce.Packet{{Data: make([]byte, vroce.MaxPacketSize)}}
			n, err := rx.Recv(in)
			c <- result{n, err}
		}()
		return c
	}
	// settle waits until the receiver has tried more than once and then
	// stopped trying: it spun, then went to sleep.
	settle := func() {
		deadline := time.Now().Add(10 * time.Second)
		for m.emptyTries.Load() < 2 {
			if time.Now().After(deadline) {
				t.Fatal("the receiver did not keep trying")
			}
			time.Sleep(100 * time.Microsecond)
		}
		for last := int64(-1); ; {
			now := m.emptyTries.Load()
			if now == last {
				return
			}
			if time.Now().After(deadline) {
				t.Fatal("the receiver never stopped trying")
			}
			last = now
			time.Sleep(5 * time.Millisecond)
		}
	}
	got := recv()
	settle()
	if err := tx.Send([]vroce.Packet{{Data: []byte("wake"), Addr: rx.LocalAddr()}}); err != nil {
		t.Fatal(err)
	}
	if r := <-got; r.err != nil || r.n != 1 {
		t.Fatalf("after sleeping: %d packets, %v", r.n, r.err)
	}
	got = recv()
	settle()
	rx.Close()
	if r := <-got; !errors.Is(r.err, net.ErrClosed) {
		t.Fatalf("Recv after Close: %v", r.err)
	}
}

// $VROCE_BUSY_POLL reaches a device opened by name, and a bad value or
// options of another provider are refused with an error that says so.
func TestBusyPollFromTheEnvironment(t *testing.T) {
	t.Setenv("VROCE_BUSY_POLL", "soon")
	if _, err := vroce.Open(vroce.Config{Provider: "udp", Addr: "127.0.0.1:0"}); err == nil || !strings.Contains(err.Error(), "VROCE_BUSY_POLL") {
		t.Fatalf("VROCE_BUSY_POLL=soon: %v", err)
	}
	t.Setenv("VROCE_BUSY_POLL", "50us")
	d, err := vroce.Open(vroce.Config{Provider: "udp", Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	if _, err := vroce.Open(vroce.Config{Provider: "udp", Addr: "127.0.0.1:0", ProviderOptions: 42}); err == nil {
		t.Fatal("options of type int were accepted")
	}
}
