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
