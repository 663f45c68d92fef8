package providertest

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"vroce.dev/vroce"
)

// Opener opens two providers that reach each other: what a sends to
// b.LocalAddr() arrives at b and the other way round. The suite closes
// them (closing twice must be harmless).
type Opener func(t *testing.T) (a, b vroce.Provider)

// Breaker makes p unable ever to receive again, as a fault would (its
// socket gone, its interface deleted), not through Close.
type Breaker func(t *testing.T, p vroce.Provider)

// Run checks that a provider keeps vroce.Provider's contract, as
// nettest.TestConn does for net.Conn: every provider runs it. Each
// subtest opens a fresh pair. Optional interfaces (BatchReceiver,
// RecvInterrupter) are checked where the provider implements them; brk
// is the provider's way to fail for good.
func Run(t *testing.T, open Opener, brk Breaker) {
	for _, c := range []struct {
		name string
		test func(t *testing.T, a, b vroce.Provider)
	}{
		{"PacketsArriveWhole", packetsArriveWhole},
		{"BodyAndTailArriveWithData", bodyAndTailArriveWithData},
		{"AFullBatchArrives", aFullBatchArrives},
		{"APacketOfTheMTUArrives", aPacketOfTheMTUArrives},
		{"ConcurrentSendsAllArrive", concurrentSendsAllArrive},
		{"RecvAfterCloseIsErrClosed", recvAfterCloseIsErrClosed},
		{"CloseWakesABlockedRecv", closeWakesABlockedRecv},
		{"SendAfterCloseFails", sendAfterCloseFails},
		{"RecvEachDeliversWhatRecvWould", recvEachDeliversWhatRecvWould},
		{"RecvEachLeavesTheRestToTheNextRecv", recvEachLeavesTheRestToTheNextRecv},
		{"InterruptEndsABlockedRecv", interruptEndsABlockedRecv},
		{"AFailureIsErrProviderFailed", func(t *testing.T, a, b vroce.Provider) { aFailureIsErrProviderFailed(t, a, b, brk) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, b := open(t)
			t.Cleanup(func() { a.Close(); b.Close() })
			warmUp(t, a, b)
			c.test(t, a, b)
		})
	}
}

// warmUp exchanges a packet each way, so that a provider that resolves
// its next hop itself (AF_XDP) has done so: like the kernel's ARP
// queue, it may drop what comes beyond a few packets while it resolves.
func warmUp(t *testing.T, a, b vroce.Provider) {
	t.Helper()
	hello := []byte("hello")
	send(t, a, vroce.Packet{Data: hello, Addr: b.LocalAddr()})
	expect(t, b, a, [][]byte{hello})
	send(t, b, vroce.Packet{Data: hello, Addr: a.LocalAddr()})
	expect(t, a, b, [][]byte{hello})
}

// numbered is a packet of size bytes that says which it is.
func numbered(i, size int) []byte {
	p := bytes.Repeat([]byte{byte(i)}, size)
	copy(p, fmt.Sprintf("%06d", i))
	return p
}

func send(t *testing.T, p vroce.Provider, pkts ...vroce.Packet) {
	t.Helper()
	if err := p.Send(pkts); err != nil {
		t.Fatalf("send: %v", err)
	}
}

// expect receives len(want) packets at rx and checks each against want in
// order, and that they come from from.
func expect(t *testing.T, rx vroce.Provider, from vroce.Provider, want [][]byte) {
	t.Helper()
	for i, p := range Receive(t, rx, len(want), min(len(want), rx.BatchSize())) {
		if !bytes.Equal(p.Data, want[i]) {
			t.Fatalf("packet %d: %d bytes differ from the %d sent", i, len(p.Data), len(want[i]))
		}
		if p.Addr.Port() != from.LocalAddr().Port() {
			t.Fatalf("packet %d from %v, want %v", i, p.Addr, from.LocalAddr())
		}
	}
}

func packetsArriveWhole(t *testing.T, a, b vroce.Provider) {
	var want [][]byte
	var out []vroce.Packet
	for i, n := range []int{1, 64, 1000} {
		want = append(want, numbered(i, n))
		out = append(out, vroce.Packet{Data: want[i], Addr: b.LocalAddr()})
	}
	send(t, a, out...)
	expect(t, b, a, want)
	send(t, b, vroce.Packet{Data: want[2], Addr: a.LocalAddr()})
	expect(t, a, b, want[2:])
}

func bodyAndTailArriveWithData(t *testing.T, a, b vroce.Provider) {
	whole := numbered(7, 1200)
	send(t, a, vroce.Packet{Data: whole[:40], Body: whole[40:1196], Tail: whole[1196:], Addr: b.LocalAddr()})
	expect(t, b, a, [][]byte{whole})
}

func aFullBatchArrives(t *testing.T, a, b vroce.Provider) {
	n := a.BatchSize()
	want := make([][]byte, n)
	out := make([]vroce.Packet, n)
	for i := range out {
		want[i] = numbered(i, 200+i)
		out[i] = vroce.Packet{Data: want[i], Addr: b.LocalAddr()}
	}
	send(t, a, out...)
	expect(t, b, a, want)
}

func aPacketOfTheMTUArrives(t *testing.T, a, b vroce.Provider) {
	size := min(a.MTU(), b.MTU(), vroce.MaxPacketSize)
	if size < 256+64 {
		t.Fatalf("MTU %d/%d: not even the smallest RoCE packet fits", a.MTU(), b.MTU())
	}
	want := numbered(1, size)
	send(t, a, vroce.Packet{Data: want, Addr: b.LocalAddr()})
	expect(t, b, a, [][]byte{want})
}

func concurrentSendsAllArrive(t *testing.T, a, b vroce.Provider) {
	// Fewer than a provider's smallest receive ring (AF_XDP's 64 frames)
	// could hold if nobody read, but read as they come.
	const senders, each = 4, 25
	var wg sync.WaitGroup
	errs := make(chan error, senders)
	for s := range senders {
		wg.Go(func() {
			for i := range each {
				if err := a.Send([]vroce.Packet{{Data: numbered(s*each+i, 100), Addr: b.LocalAddr()}}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	got := Receive(t, b, senders*each, b.BatchSize())
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent send: %v", err)
	}
	seen := map[string]bool{}
	for _, p := range got {
		id := string(p.Data[:6])
		if seen[id] {
			t.Fatalf("packet %s arrived twice", id)
		}
		seen[id] = true
	}
}

func recvAfterCloseIsErrClosed(t *testing.T, _, b vroce.Provider) {
	if err := b.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if _, err := b.Recv(buffers(4)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("recv after close: %v, want net.ErrClosed", err)
	}
}

func closeWakesABlockedRecv(t *testing.T, _, b vroce.Provider) {
	done := make(chan error, 1)
	go func() {
		_, err := b.Recv(buffers(4))
		done <- err
	}()
	// Whether the Recv has blocked yet or not, it must end with
	// net.ErrClosed: the contract holds either way.
	if err := b.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("recv woken by close: %v, want net.ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("close did not wake a blocked recv within 10 s")
	}
}

func sendAfterCloseFails(t *testing.T, a, b vroce.Provider) {
	if err := a.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if err := a.Send([]vroce.Packet{{Data: []byte("late"), Addr: b.LocalAddr()}}); err == nil {
		t.Fatal("send after close succeeded")
	}
}

func recvEachDeliversWhatRecvWould(t *testing.T, a, b vroce.Provider) {
	br := batchReceiver(t, b)
	const n = 40
	want := make([][]byte, n)
	for i := range want {
		want[i] = numbered(i, 100+i)
		send(t, a, vroce.Packet{Data: want[i], Addr: b.LocalAddr()})
	}
	got := recvEach(t, br, n, br.BatchSize())
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("RecvEach packet %d differs from the one sent", i)
		}
	}
}

func recvEachLeavesTheRestToTheNextRecv(t *testing.T, a, b vroce.Provider) {
	br := batchReceiver(t, b)
	const n = 10
	want := make([][]byte, n)
	out := make([]vroce.Packet, n)
	for i := range out {
		want[i] = numbered(i, 300)
		out[i] = vroce.Packet{Data: want[i], Addr: b.LocalAddr(), Coalesce: true}
	}
	// One segmented datagram where the provider coalesces, received three
	// packets at a time: RecvEach stops after the first three and holds
	// the other segments for the next Recv.
	send(t, a, out...)
	got := recvEach(t, br, 1, 3)
	rest := Receive(t, b, n-len(got), 4)
	for _, p := range rest {
		got = append(got, p.Data)
	}
	if len(got) != n {
		t.Fatalf("%d packets of %d", len(got), n)
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("packet %d differs: RecvEach lost or reordered what it left", i)
		}
	}
}

// batchReceiver is b as a BatchReceiver, or skips the test: a provider
// need not be one.
func batchReceiver(t *testing.T, b vroce.Provider) vroce.BatchReceiver {
	t.Helper()
	br, ok := b.(vroce.BatchReceiver)
	if !ok {
		t.Skipf("%T is not a vroce.BatchReceiver: nothing to check", b)
	}
	return br
}

// recvEach runs RecvEach on per buffers until at least n packets came,
// copying each inside deliver (the memory is the provider's only until
// then), and returns them in order.
func recvEach(t *testing.T, br vroce.BatchReceiver, n, per int) [][]byte {
	t.Helper()
	timer := time.AfterFunc(10*time.Second, func() { br.Close() })
	defer timer.Stop()
	pkts := buffers(per)
	var got [][]byte
	err := br.RecvEach(pkts, func(k int) bool {
		for _, p := range pkts[:k] {
			got = append(got, append([]byte(nil), p.Data...))
		}
		return len(got) < n
	})
	if err != nil {
		t.Fatalf("RecvEach after %d of %d packets: %v", len(got), n, err)
	}
	return got
}

func interruptEndsABlockedRecv(t *testing.T, a, b vroce.Provider) {
	ri, ok := b.(vroce.RecvInterrupter)
	if !ok {
		t.Skipf("%T is not a vroce.RecvInterrupter: nothing to check", b)
	}
	done := make(chan error, 1)
	go func() {
		n, err := b.Recv(buffers(4))
		if err == nil && n != 0 {
			err = fmt.Errorf("returned %d packets, none sent", n)
		}
		done <- err
	}()
	// Blocked now or about to start: either way it returns soon.
	ri.InterruptRecv()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("interrupted recv: %v", err)
		}
	case <-time.After(10 * time.Second):
		b.Close()
		t.Fatal("InterruptRecv did not end a recv within 10 s")
	}
	// The provider receives as before.
	send(t, a, vroce.Packet{Data: []byte("after"), Addr: b.LocalAddr()})
	expect(t, b, a, [][]byte{[]byte("after")})
}

func buffers(n int) []vroce.Packet {
	pkts := make([]vroce.Packet, n)
	for i := range pkts {
		pkts[i].Data = make([]byte, vroce.MaxPacketSize)
	}
	return pkts
}

// aFailureIsErrProviderFailed: once a provider can never receive again,
// Recv says so with an error wrapping vroce.ErrProviderFailed (the
// device then fails its QPs and reports EventDeviceFatal), and does so
// soon, rather than blocking or returning nothing for ever.
func aFailureIsErrProviderFailed(t *testing.T, _, b vroce.Provider, brk Breaker) {
	brk(t, b)
	errc := make(chan error, 1)
	go func() {
		pkts := buffers(b.BatchSize())
		for range 1000 { // a provider may first hand over what came before
			if _, err := b.Recv(pkts); err != nil {
				errc <- err
				return
			}
		}
		errc <- errors.New("1,000 receives after the failure, none of them an error")
	}()
	select {
	case err := <-errc:
		if !errors.Is(err, vroce.ErrProviderFailed) {
			t.Fatalf("Recv after a failure: %v, want an error wrapping vroce.ErrProviderFailed", err)
		}
	case <-time.After(10 * time.Second):
		b.Close() // let the blocked Recv go
		<-errc
		t.Fatal("Recv after a failure blocked for 10 s")
	}
}
