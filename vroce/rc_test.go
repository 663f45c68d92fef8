package vroce_test

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"vroce.dev/vroce"
)

func TestRCSendWriteReadAtomic(t *testing.T) {
	a, b, _ := newSimPair(t, defaultPairOpts())

	// SEND of 3.5 MTUs into a posted receive.
	const sendLen = 3584
	fill(a.buf[:sendLen], 1)
	if err := b.qp.PostRecv(vroce.RecvWR{ID: 7, SGL: []vroce.SGE{b.mr.SGE(0, 8192)}}); err != nil {
		t.Fatal(err)
	}
	if err := a.qp.PostSend(vroce.SendWR{ID: 1, Opcode: vroce.WRSendWithImm, Imm: 0xfeed, Flags: vroce.SendSignaled, SGL: []vroce.SGE{a.mr.SGE(0, sendLen)}}); err != nil {
		t.Fatal(err)
	}
	mustSucceed(t, waitCompletions(t, a.cq, 1, 5*time.Second))
	rwc := waitCompletions(t, b.cq, 1, 5*time.Second)
	mustSucceed(t, rwc)
	if rwc[0].ID != 7 || rwc[0].ByteLen != sendLen || rwc[0].Imm != 0xfeed || rwc[0].Flags&vroce.WCWithImm == 0 || rwc[0].SrcQP != a.qp.QPN() {
		t.Fatalf("receive completion %+v", rwc[0])
	}
	if !bytes.Equal(b.buf[:sendLen], a.buf[:sendLen]) {
		t.Fatal("SEND data differs")
	}

	// RDMA WRITE of 100 KiB at an offset.
	const wlen = 100 << 10
	fill(a.buf[:wlen], 2)
	if err := a.qp.PostSend(vroce.SendWR{ID: 2, Opcode: vroce.WRRDMAWrite, Flags: vroce.SendSignaled, SGL: []vroce.SGE{a.mr.SGE(0, wlen)},
		RemoteAddr: b.mr.Addr() + 4096, RKey: b.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	mustSucceed(t, waitCompletions(t, a.cq, 1, 5*time.Second))
	if !bytes.Equal(b.buf[4096:4096+wlen], a.buf[:wlen]) {
		t.Fatal("WRITE data differs")
	}

	// RDMA READ of 50 KiB back into a's buffer at 512 KiB.
	const rlen = 50 << 10
	fill(b.buf[:rlen], 3)
	if err := a.qp.PostSend(vroce.SendWR{ID: 3, Opcode: vroce.WRRDMARead, Flags: vroce.SendSignaled, SGL: []vroce.SGE{a.mr.SGE(512<<10, rlen)},
		RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	mustSucceed(t, waitCompletions(t, a.cq, 1, 5*time.Second))
	if !bytes.Equal(a.buf[512<<10:512<<10+rlen], b.buf[:rlen]) {
		t.Fatal("READ data differs")
	}

	// FETCH_AND_ADD then CMP_AND_SWP on b's word at 8.
	binary.NativeEndian.PutUint64(b.buf[8:], 40)
	if err := a.qp.PostSend(
		vroce.SendWR{ID: 4, Opcode: vroce.WRAtomicFetchAndAdd, Flags: vroce.SendSignaled, SGL: []vroce.SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr() + 8, RKey: b.mr.RKey(), CompareAdd: 2},
		vroce.SendWR{ID: 5, Opcode: vroce.WRAtomicCmpAndSwp, Flags: vroce.SendSignaled, SGL: []vroce.SGE{a.mr.SGE(8, 8)}, RemoteAddr: b.mr.Addr() + 8, RKey: b.mr.RKey(), CompareAdd: 42, Swap: 99},
	); err != nil {
		t.Fatal(err)
	}
	mustSucceed(t, waitCompletions(t, a.cq, 2, 5*time.Second))
	if got := binary.NativeEndian.Uint64(a.buf[0:]); got != 40 {
		t.Fatalf("FETCH_AND_ADD returned %d, want 40", got)
	}
	if got := binary.NativeEndian.Uint64(a.buf[8:]); got != 42 {
		t.Fatalf("CMP_AND_SWP returned %d, want 42", got)
	}
	if got := binary.NativeEndian.Uint64(b.buf[8:]); got != 99 {
		t.Fatalf("remote word is %d, want 99", got)
	}
}
