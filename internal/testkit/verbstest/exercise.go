package verbstest

import (
	"bytes"
	"testing"
	"time"

	"vroce.dev/vroce"
)

// Exercise moves a WRITE and a READ of size bytes, a SEND and an atomic
// through a pair (a requests) and verifies every byte; on failure it logs
// both QPs' counters.
func Exercise(t testing.TB, a, b *Node, size int) {
	t.Helper()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("requester %+v", a.QP.Stats())
			t.Logf("responder %+v", b.QP.Stats())
		}
	})
	Fill(a.Buf[:size], 5)
	err := a.QP.PostSend(vroce.SendWR{ID: 1, Opcode: vroce.WRRDMAWrite, Flags: vroce.SendSignaled,
		SGL: []vroce.SGE{a.MR.SGE(0, size)}, RemoteAddr: b.MR.Addr(), RKey: b.MR.RKey()})
	if err != nil {
		t.Fatal(err)
	}
	MustSucceed(t, WaitCompletions(t, a.CQ, 1, 20*time.Second))
	Sync(b)
	if !bytes.Equal(a.Buf[:size], b.Buf[:size]) {
		t.Fatal("WRITE: data differs")
	}
	Fill(b.Buf[size:2*size], 9)
	Sync(b)
	err = a.QP.PostSend(vroce.SendWR{ID: 2, Opcode: vroce.WRRDMARead, Flags: vroce.SendSignaled,
		SGL: []vroce.SGE{a.MR.SGE(size, size)}, RemoteAddr: b.MR.Addr() + uint64(size), RKey: b.MR.RKey()})
	if err != nil {
		t.Fatal(err)
	}
	MustSucceed(t, WaitCompletions(t, a.CQ, 1, 20*time.Second))
	if !bytes.Equal(a.Buf[size:2*size], b.Buf[size:2*size]) {
		t.Fatal("READ: data differs")
	}
	if err := b.QP.PostRecv(vroce.RecvWR{ID: 3, SGL: []vroce.SGE{b.MR.SGE(0, 4096)}}); err != nil {
		t.Fatal(err)
	}
	err = a.QP.PostSend(
		vroce.SendWR{ID: 4, Opcode: vroce.WRSend, Flags: vroce.SendSignaled | vroce.SendInline, Inline: []byte("hello, vRoCE")},
		vroce.SendWR{ID: 5, Opcode: vroce.WRAtomicFetchAndAdd, Flags: vroce.SendSignaled, SGL: []vroce.SGE{a.MR.SGE(0, 8)}, RemoteAddr: b.MR.Addr() + 64, RKey: b.MR.RKey(), CompareAdd: 1},
	)
	if err != nil {
		t.Fatal(err)
	}
	MustSucceed(t, WaitCompletions(t, a.CQ, 2, 20*time.Second))
	rwc := WaitCompletions(t, b.CQ, 1, 20*time.Second)
	MustSucceed(t, rwc)
	if got := string(b.Buf[:rwc[0].ByteLen]); got != "hello, vRoCE" {
		t.Fatalf("SEND delivered %q", got)
	}
}

// PingPong has a SEND size bytes to b and b echo them back, rounds times,
// every echo checked: requests both ways, so ACKs can ride on the
// replies. It uses the last 2*size bytes of both buffers.
func PingPong(t testing.TB, a, b *Node, rounds, size int) {
	t.Helper()
	out, back := len(a.Buf)-2*size, len(a.Buf)-size
	recv := func(n *Node, i, off int) {
		if err := n.QP.PostRecv(vroce.RecvWR{ID: uint64(i), SGL: []vroce.SGE{n.MR.SGE(off, size)}}); err != nil {
			t.Fatal(err)
		}
	}
	send := func(n *Node, i int) {
		if err := n.QP.PostSend(vroce.SendWR{ID: uint64(i), Opcode: vroce.WRSend, Flags: vroce.SendSignaled, SGL: []vroce.SGE{n.MR.SGE(out, size)}}); err != nil {
			t.Fatal(err)
		}
	}
	// awaitRecv takes completions until receive i; the node's send
	// completions come before or after it.
	sends := map[*Node]int{}
	awaitRecv := func(n *Node, i int) {
		for {
			wc := WaitCompletions(t, n.CQ, 1, 30*time.Second)
			MustSucceed(t, wc)
			if wc[0].Opcode != vroce.WCRecv {
				sends[n]--
				continue
			}
			if wc[0].ID != uint64(i) || int(wc[0].ByteLen) != size {
				t.Fatalf("round %d: receive %+v", i, wc[0])
			}
			return
		}
	}
	// settle waits for n's sends to complete: a send's memory may be read
	// again (a retransmission) until then, so it is not reused before.
	settle := func(n *Node) {
		for ; sends[n] > 0; sends[n]-- {
			wc := WaitCompletions(t, n.CQ, 1, 30*time.Second)
			MustSucceed(t, wc)
			if wc[0].Opcode == vroce.WCRecv {
				t.Fatalf("an unexpected receive: %+v", wc[0])
			}
		}
	}
	for i := 0; i < rounds; i++ {
		settle(a)
		settle(b)
		recv(b, i, out)
		recv(a, i, back)
		Fill(a.Buf[out:out+size], byte(i+1))
		send(a, i)
		sends[a]++
		awaitRecv(b, i)
		send(b, i) // the echo, from where the request landed
		sends[b]++
		awaitRecv(a, i)
		if !bytes.Equal(a.Buf[back:back+size], a.Buf[out:out+size]) {
			t.Fatalf("round %d: the echo differs", i)
		}
	}
	settle(a)
	settle(b)
}
