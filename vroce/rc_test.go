package vroce_test

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"vroce.dev/vroce"
)

func TestRCSendWriteReadAtomic(t *testing.T) {
	a, b, _ := simPair(t, defaultOpts())

	// SEND of 3.5 MTUs into a posted receive.
	const sendLen = 3584
	fill(a.Buf[:sendLen], 1)
	if err := b.QP.PostRecv(vroce.RecvWR{ID: 7, SGL: []vroce.SGE{b.MR.SGE(0, 8192)}}); err != nil {
		t.Fatal(err)
	}
	if err := a.QP.PostSend(vroce.SendWR{ID: 1, Opcode: vroce.WRSendWithImm, Imm: 0xfeed, Flags: vroce.SendSignaled, SGL: []vroce.SGE{a.MR.SGE(0, sendLen)}}); err != nil {
		t.Fatal(err)
	}
	mustSucceed(t, waitCompletions(t, a.CQ, 1, 5*time.Second))
	rwc := waitCompletions(t, b.CQ, 1, 5*time.Second)
	mustSucceed(t, rwc)
	if rwc[0].ID != 7 || rwc[0].ByteLen != sendLen || rwc[0].Imm != 0xfeed || rwc[0].Flags&vroce.WCWithImm == 0 || rwc[0].SrcQP != a.QP.QPN() {
		t.Fatalf("receive completion %+v", rwc[0])
	}
	if !bytes.Equal(b.Buf[:sendLen], a.Buf[:sendLen]) {
		t.Fatal("SEND data differs")
	}

	// RDMA WRITE of 100 KiB at an offset.
	const wlen = 100 << 10
	fill(a.Buf[:wlen], 2)
	if err := a.QP.PostSend(vroce.SendWR{ID: 2, Opcode: vroce.WRRDMAWrite, Flags: vroce.SendSignaled, SGL: []vroce.SGE{a.MR.SGE(0, wlen)},
		RemoteAddr: b.MR.Addr() + 4096, RKey: b.MR.RKey()}); err != nil {
		t.Fatal(err)
	}
	mustSucceed(t, waitCompletions(t, a.CQ, 1, 5*time.Second))
	if !bytes.Equal(b.Buf[4096:4096+wlen], a.Buf[:wlen]) {
		t.Fatal("WRITE data differs")
	}

	// RDMA READ of 50 KiB back into a's buffer at 512 KiB.
	const rlen = 50 << 10
	fill(b.Buf[:rlen], 3)
	if err := a.QP.PostSend(vroce.SendWR{ID: 3, Opcode: vroce.WRRDMARead, Flags: vroce.SendSignaled, SGL: []vroce.SGE{a.MR.SGE(512<<10, rlen)},
		RemoteAddr: b.MR.Addr(), RKey: b.MR.RKey()}); err != nil {
		t.Fatal(err)
	}
	mustSucceed(t, waitCompletions(t, a.CQ, 1, 5*time.Second))
	if !bytes.Equal(a.Buf[512<<10:512<<10+rlen], b.Buf[:rlen]) {
		t.Fatal("READ data differs")
	}

	// FETCH_AND_ADD then CMP_AND_SWP on b's word at 900000, outside what
	// the READ covered (a late duplicate of that READ may read it again).
	const word = 900000
	binary.NativeEndian.PutUint64(b.Buf[word:], 40)
	if err := a.QP.PostSend(
		vroce.SendWR{ID: 4, Opcode: vroce.WRAtomicFetchAndAdd, Flags: vroce.SendSignaled, SGL: []vroce.SGE{a.MR.SGE(0, 8)}, RemoteAddr: b.MR.Addr() + word, RKey: b.MR.RKey(), CompareAdd: 2},
		vroce.SendWR{ID: 5, Opcode: vroce.WRAtomicCmpAndSwp, Flags: vroce.SendSignaled, SGL: []vroce.SGE{a.MR.SGE(8, 8)}, RemoteAddr: b.MR.Addr() + word, RKey: b.MR.RKey(), CompareAdd: 42, Swap: 99},
	); err != nil {
		t.Fatal(err)
	}
	mustSucceed(t, waitCompletions(t, a.CQ, 2, 5*time.Second))
	if got := binary.NativeEndian.Uint64(a.Buf[0:]); got != 40 {
		t.Fatalf("FETCH_AND_ADD returned %d, want 40", got)
	}
	if got := binary.NativeEndian.Uint64(a.Buf[8:]); got != 42 {
		t.Fatalf("CMP_AND_SWP returned %d, want 42", got)
	}
	if got := binary.NativeEndian.Uint64(b.Buf[word:]); got != 99 {
		t.Fatalf("remote word is %d, want 99", got)
	}
}
