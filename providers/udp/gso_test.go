package udp

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"

	"vroce.dev/internal/testkit/providertest"
	"vroce.dev/vroce"
)

// TestCoalescedSendsArriveAsSeparateDatagrams: packets marked Coalesce go
// out in one segmented send (where the kernel offers UDP GSO) and arrive
// as the datagrams they were, contents and lengths intact, the short last
// one too; unmarked packets are never coalesced.
func TestCoalescedSendsArriveAsSeparateDatagrams(t *testing.T) {
	forEachWriter(t, testCoalescedSends)
}

func testCoalescedSends(t *testing.T, portable bool) {
	rx, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	p, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if portable {
		p.bw = newXnetWriter(p.bc, batchSize, p.v6)
	}
	to := rx.LocalAddr().(*net.UDPAddr).AddrPort()
	var pkts []vroce.Packet
	for i := range 12 {
		n := 1000
		if i == 11 {
			n = 300
		}
		pkts = append(pkts, vroce.Packet{Data: bytes.Repeat([]byte{byte(i)}, n), Addr: netip.AddrPortFrom(to.Addr(), to.Port()), Coalesce: i < 12})
	}
	pkts = append(pkts, vroce.Packet{Data: []byte("alone"), Addr: pkts[0].Addr})
	if err := p.Send(pkts); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 70000)
	for i, want := range pkts {
		rx.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := rx.Read(buf)
		if err != nil {
			t.Fatalf("datagram %d: %v", i, err)
		}
		if !bytes.Equal(buf[:n], want.Data) {
			t.Fatalf("datagram %d: %d bytes, want %d", i, n, len(want.Data))
		}
	}
	if gsoSupported && p.gso && p.gsoSent != 1 {
		t.Fatalf("%d coalesced sends, want 1", p.gsoSent)
	}
	t.Logf("GSO in use: %v", p.gso && p.gsoSent > 0)
}

// TestCoalescedReceiveIsCutIntoPackets: a coalesced send from one
// provider reaches another that receives with UDP GRO (on loopback the
// run crosses whole); Recv cuts it back into the packets, even when the
// caller takes fewer at a time than arrived.
func TestCoalescedReceiveIsCutIntoPackets(t *testing.T) {
	tx, rx := providerPair(t)
	var sent []vroce.Packet
	for i := range 20 {
		n := 1200
		if i == 19 {
			n = 77
		}
		sent = append(sent, vroce.Packet{Data: bytes.Repeat([]byte{byte(i + 1)}, n), Addr: rx.LocalAddr(), Coalesce: true})
	}
	if err := tx.Send(sent); err != nil {
		t.Fatal(err)
	}
	for i, p := range providertest.Receive(t, rx, len(sent), 3) {
		if !bytes.Equal(p.Data, sent[i].Data) || p.Addr != tx.LocalAddr() {
			t.Fatalf("packet %d: %d bytes of %d from %v, want %d bytes of %d from %v", i, len(p.Data), p.Data[0], p.Addr, len(sent[i].Data), i+1, tx.LocalAddr())
		}
	}
	t.Logf("GRO in use: %v", rx.gro)
}

// providerPair opens two providers on loopback, closed with the test.
func providerPair(t testing.TB) (tx, rx *Provider) {
	t.Helper()
	for _, p := range []**Provider{&tx, &rx} {
		var err error
		if *p, err = Listen("127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { (*p).Close() })
	}
	return tx, rx
}

// forEachWriter runs test with sendmmsg's writer (where there is one)
// and with the portable one, x/net's, which other systems use.
func forEachWriter(t *testing.T, test func(t *testing.T, portable bool)) {
	for _, portable := range []bool{false, true} {
		t.Run(fmt.Sprintf("portable writer %v", portable), func(t *testing.T) { test(t, portable) })
	}
}

// TestPortableReceivePath: the x/net reader, which other systems use,
// delivers the same datagrams with their sources.
func TestPortableReceivePath(t *testing.T) {
	tx, rx := providerPair(t)
	rx.br = newXnetReader(rx.bc, groBatch)
	sent := []vroce.Packet{{Data: []byte("one"), Addr: rx.LocalAddr()}, {Data: []byte("two"), Addr: rx.LocalAddr()}}
	if err := tx.Send(sent); err != nil {
		t.Fatal(err)
	}
	for i, p := range providertest.Receive(t, rx, len(sent), 2) {
		if !bytes.Equal(p.Data, sent[i].Data) || p.Addr != tx.LocalAddr() {
			t.Fatalf("packet %d: %q from %v", i, p.Data, p.Addr)
		}
	}
}

// TestPacketsInPiecesArriveWhole: packets handed over in three pieces
// (headers, a payload lent from registered memory, pad and ICRC) arrive
// as the whole packets they make, coalesced or alone, and a run's
// segment size counts all three pieces.
func TestPacketsInPiecesArriveWhole(t *testing.T) {
	forEachWriter(t, testPacketsInPieces)
}

func testPacketsInPieces(t *testing.T, portable bool) {
	tx := sendArrivesWhole(t, portable, func(to netip.AddrPort) []vroce.Packet {
		var sent []vroce.Packet
		for i := range 10 {
			body := bytes.Repeat([]byte{byte(i + 1)}, 2000)
			if i == 8 {
				body = body[:500] // the run's short last segment
			}
			sent = append(sent, vroce.Packet{Data: []byte{0xa0, byte(i), 0, 0}, Body: body, Tail: []byte{0, 0, 0xc0, byte(i)}, Addr: to, Coalesce: i < 9})
		}
		return append(sent, vroce.Packet{Data: []byte("head only"), Addr: to})
	})
	if gsoSupported && tx.gso && tx.gsoSent != 1 {
		t.Fatalf("%d coalesced sends, want 1", tx.gsoSent)
	}
}

// sendArrivesWhole sends what build makes for a receiving provider's
// address, from a provider of its own (with the portable writer, asked),
// and checks that each packet arrives as the whole packet its pieces
// make. It returns the sender.
func sendArrivesWhole(t *testing.T, portable bool, build func(to netip.AddrPort) []vroce.Packet) *Provider {
	t.Helper()
	tx, rx := providerPair(t)
	if portable {
		tx.bw = newXnetWriter(tx.bc, batchSize, tx.v6)
	}
	sent := build(rx.LocalAddr())
	var whole [][]byte
	for _, pk := range sent {
		whole = append(whole, pk.AppendTo(nil))
	}
	if err := tx.Send(sent); err != nil {
		t.Fatal(err)
	}
	for i, p := range providertest.Receive(t, rx, len(sent), 4) {
		if !bytes.Equal(p.Data, whole[i]) {
			t.Fatalf("packet %d: %d bytes, want %d (%d + %d + %d)", i, len(p.Data), len(whole[i]), len(sent[i].Data), len(sent[i].Body), len(sent[i].Tail))
		}
	}
	return tx
}

// refusingWriter stands for a route that cannot segment: it fails every
// segmented message with EIO, as Linux does without checksum offload,
// and passes the rest to the real writer.
type refusingWriter struct {
	batchWriter
	refused int
}

func (w *refusingWriter) send(from, n int) (int, error) {
	for i := from; i < n; i++ {
		if w.segmented(i) {
			sent := 0
			if i > from {
				var err error
				if sent, err = w.batchWriter.send(from, i); err != nil || sent < i-from {
					return sent, err // the caller asks again from where it stopped
				}
			}
			w.refused++
			return sent, os.NewSyscallError("sendmmsg", syscall.EIO)
		}
	}
	return w.batchWriter.send(from, n)
}

// TestRefusedSegmentationFallsBackToSingleDatagrams: when the kernel
// refuses a segmented send, the provider sends the rest of the batch,
// and everything after, one datagram per packet; nothing is lost.
// Both writers.
func TestRefusedSegmentationFallsBackToSingleDatagrams(t *testing.T) {
	if !gsoSupported {
		t.Skip("no UDP GSO on this system: nothing to refuse")
	}
	forEachWriter(t, func(t *testing.T, portable bool) {
		tx, rx := providerPair(t)
		if portable {
			tx.bw = newXnetWriter(tx.bc, batchSize, tx.v6)
		}
		w := &refusingWriter{batchWriter: tx.bw}
		tx.bw = w
		var sent []vroce.Packet
		for i := range 12 {
			// One alone, then a run the provider would coalesce.
			sent = append(sent, vroce.Packet{Data: bytes.Repeat([]byte{byte(i + 1)}, 700), Addr: rx.LocalAddr(), Coalesce: i > 0})
		}
		if err := tx.Send(sent); err != nil {
			t.Fatal(err)
		}
		if err := tx.Send(sent[1:4]); err != nil { // after the fallback: singly at once
			t.Fatal(err)
		}
		want := append(sent, sent[1:4]...)
		for i, p := range providertest.Receive(t, rx, len(want), 4) {
			if !bytes.Equal(p.Data, want[i].Data) {
				t.Fatalf("packet %d: %d bytes of %d, want %d bytes of %d", i, len(p.Data), p.Data[0], len(want[i].Data), want[i].Data[0])
			}
		}
		if tx.gso || w.refused != 1 {
			t.Fatalf("GSO still on: %v; segmented sends refused: %d, want 1", tx.gso, w.refused)
		}
	})
}

// TestPacketsLaidEndToEndArriveWhole: packets laid end to end in one
// piece of memory, as the engine lays a run it may coalesce (copied
// payloads one after another; lent payloads with each packet's tail just
// before the next one's headers), arrive as the packets they were, a run
// and a packet alone alike.
func TestPacketsLaidEndToEndArriveWhole(t *testing.T) {
	forEachWriter(t, testPacketsLaidEndToEnd)
}

func testPacketsLaidEndToEnd(t *testing.T, portable bool) {
	sendArrivesWhole(t, portable, func(to netip.AddrPort) []vroce.Packet {
		mem := make([]byte, 64<<10)
		for i := range mem {
			mem[i] = byte(i * 13)
		}
		var sent []vroce.Packet
		at := 0
		for i := range 8 { // copied payloads, one after another
			n := 1200
			if i == 7 {
				n = 300 // the run's short last segment
			}
			sent = append(sent, vroce.Packet{Data: mem[at : at+n], Addr: to, Coalesce: true})
			at += n
		}
		body := bytes.Repeat([]byte{0xbd}, 2000)
		for range 6 { // lent payloads: headers, then the tail, in the batch's memory
			sent = append(sent, vroce.Packet{Data: mem[at : at+16], Body: body, Tail: mem[at+16 : at+24], Addr: to, Coalesce: true})
			at += 24
		}
		return append(sent, vroce.Packet{Data: mem[at : at+100], Addr: to})
	})
}
