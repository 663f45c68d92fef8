package vroce_test

import (
	"bytes"
	"testing"
	"time"

	"vroce.dev/internal/testkit/verbstest"
	"vroce.dev/vroce"
)

// TestEveryPathMTUSegmentsAndReassembles moves messages of awkward sizes
// (0, 1, one under, at and over a packet, many packets) at each IB MTU.
func TestEveryPathMTUSegmentsAndReassembles(t *testing.T) {
	for _, mtu := range []vroce.MTU{vroce.MTU256, vroce.MTU512, vroce.MTU1024, vroce.MTU2048, vroce.MTU4096} {
		t.Run(mtu.String(), func(t *testing.T) {
			o := defaultOpts()
			o.MTU = mtu
			a, b, _ := simPair(t, o)
			m := int(mtu)
			for _, size := range []int{0, 1, m - 1, m, m + 1, 7*m + 3} {
				fill(a.Buf[:size], byte(size))
				if err := b.QP.PostRecv(vroce.RecvWR{ID: uint64(size), SGL: []vroce.SGE{b.MR.SGE(0, 8*m)}}); err != nil {
					t.Fatal(err)
				}
				if err := a.QP.PostSend(
					vroce.SendWR{ID: 1, Opcode: vroce.WRSend, Flags: vroce.SendSignaled, SGL: []vroce.SGE{a.MR.SGE(0, size)}},
					vroce.SendWR{ID: 2, Opcode: vroce.WRRDMAWrite, Flags: vroce.SendSignaled, SGL: []vroce.SGE{a.MR.SGE(0, size)}, RemoteAddr: b.MR.Addr() + 65536, RKey: b.MR.RKey()},
					vroce.SendWR{ID: 3, Opcode: vroce.WRRDMARead, Flags: vroce.SendSignaled, SGL: []vroce.SGE{a.MR.SGE(131072, size)}, RemoteAddr: b.MR.Addr() + 65536, RKey: b.MR.RKey()},
				); err != nil {
					t.Fatal(err)
				}
				mustSucceed(t, waitCompletions(t, a.CQ, 3, 5*time.Second))
				wc := waitCompletions(t, b.CQ, 1, 5*time.Second)[0]
				if int(wc.ByteLen) != size || !bytes.Equal(b.Buf[:size], a.Buf[:size]) ||
					!bytes.Equal(b.Buf[65536:65536+size], a.Buf[:size]) || !bytes.Equal(a.Buf[131072:131072+size], a.Buf[:size]) {
					t.Fatalf("size %d: data or length wrong (receive %+v)", size, wc)
				}
			}
		})
	}
}

// TestExtensionMTUsSegmentAndReassemble: the vRoCE extension MTUs, on a
// link that carries them, as the IB MTUs above; piggybacked ACKs included,
// and payloads both lent straight from registered memory and, from a
// page's start, copied behind their headers when alone (joinLone).
func TestExtensionMTUsSegmentAndReassemble(t *testing.T) {
	for _, mtu := range []vroce.MTU{vroce.MTU1344, vroce.MTU8192, vroce.MTU16384, vroce.MTU32768} {
		t.Run(mtu.String(), func(t *testing.T) {
			o := defaultOpts()
			o.MTU = mtu
			o.Sim.MTU = 40000
			m := int(mtu)
			o.BufSize = 48 * m
			a, b, _ := simPair(t, o)
			recvAt, writeAt, readAt := 0, 16*m, 32*m
			for i, size := range []int{1, m - 1, m, m + 1, 7*m + 3, m, 7*m + 3} {
				from := 0
				if i >= 5 {
					from = 256
				}
				src := a.Buf[from : from+size]
				fill(src, byte(size))
				if err := b.QP.PostRecv(vroce.RecvWR{ID: uint64(size), SGL: []vroce.SGE{b.MR.SGE(recvAt, 8*m)}}); err != nil {
					t.Fatal(err)
				}
				if err := a.QP.PostSend(
					vroce.SendWR{ID: 1, Opcode: vroce.WRSend, Flags: vroce.SendSignaled, SGL: []vroce.SGE{a.MR.SGE(from, size)}},
					vroce.SendWR{ID: 2, Opcode: vroce.WRRDMAWrite, Flags: vroce.SendSignaled, SGL: []vroce.SGE{a.MR.SGE(from, size)}, RemoteAddr: b.MR.Addr() + uint64(writeAt), RKey: b.MR.RKey()},
					vroce.SendWR{ID: 3, Opcode: vroce.WRRDMARead, Flags: vroce.SendSignaled, SGL: []vroce.SGE{a.MR.SGE(readAt, size)}, RemoteAddr: b.MR.Addr() + uint64(writeAt), RKey: b.MR.RKey()},
				); err != nil {
					t.Fatal(err)
				}
				mustSucceed(t, waitCompletions(t, a.CQ, 3, 5*time.Second))
				wc := waitCompletions(t, b.CQ, 1, 5*time.Second)[0]
				if int(wc.ByteLen) != size || !bytes.Equal(b.Buf[recvAt:recvAt+size], src) ||
					!bytes.Equal(b.Buf[writeAt:writeAt+size], src) || !bytes.Equal(a.Buf[readAt:readAt+size], src) {
					t.Fatalf("size %d from %d: data or length wrong (receive %+v)", size, from, wc)
				}
			}
			verbstest.PingPong(t, a, b, 20, m+5)
		})
	}
}

// TestScatterGatherAcrossSGEs gathers a SEND from four pieces and scatters
// it into three receive buffers; a READ scatters the same way.
func TestScatterGatherAcrossSGEs(t *testing.T) {
	a, b, _ := simPair(t, defaultOpts())
	fill(a.Buf[:8192], 9)
	gatherList := []vroce.SGE{a.MR.SGE(100, 1000), a.MR.SGE(5000, 1), a.MR.SGE(3000, 2047), a.MR.SGE(0, 52)}
	var want []byte
	for _, s := range []struct{ off, n int }{{100, 1000}, {5000, 1}, {3000, 2047}, {0, 52}} {
		want = append(want, a.Buf[s.off:s.off+s.n]...)
	}
	scatterList := []vroce.SGE{b.MR.SGE(10000, 1500), b.MR.SGE(20000, 100), b.MR.SGE(30000, 2000)}
	if err := b.QP.PostRecv(vroce.RecvWR{ID: 1, SGL: scatterList}); err != nil {
		t.Fatal(err)
	}
	if err := a.QP.PostSend(vroce.SendWR{ID: 2, Opcode: vroce.WRSend, Flags: vroce.SendSignaled, SGL: gatherList}); err != nil {
		t.Fatal(err)
	}
	mustSucceed(t, waitCompletions(t, a.CQ, 1, 5*time.Second))
	wc := waitCompletions(t, b.CQ, 1, 5*time.Second)[0]
	got := append(append(append([]byte(nil), b.Buf[10000:11500]...), b.Buf[20000:20100]...), b.Buf[30000:30000+len(want)-1600]...)
	if wc.Status != vroce.WCSuccess || int(wc.ByteLen) != len(want) || !bytes.Equal(got, want) {
		t.Fatalf("scattered SEND wrong: %+v", wc)
	}
	// READ the scattered bytes back into three pieces of a's memory.
	readInto := []vroce.SGE{a.MR.SGE(40000, 10), a.MR.SGE(50000, 3000), a.MR.SGE(60000, len(want)-3010)}
	if err := a.QP.PostSend(vroce.SendWR{ID: 3, Opcode: vroce.WRRDMARead, Flags: vroce.SendSignaled, SGL: readInto, RemoteAddr: b.MR.Addr() + 10000, RKey: b.MR.RKey()}); err != nil {
		t.Fatal(err)
	}
	mustSucceed(t, waitCompletions(t, a.CQ, 1, 5*time.Second))
	back := append(append(append([]byte(nil), a.Buf[40000:40010]...), a.Buf[50000:53000]...), a.Buf[60000:60000+len(want)-3010]...)
	if !bytes.Equal(back, b.Buf[10000:10000+len(want)]) {
		t.Fatal("scattered READ wrong")
	}
	// A receive too small completes with a length error on both sides.
	if err := b.QP.PostRecv(vroce.RecvWR{ID: 4, SGL: []vroce.SGE{b.MR.SGE(0, 10)}}); err != nil {
		t.Fatal(err)
	}
	if err := a.QP.PostSend(vroce.SendWR{ID: 5, Opcode: vroce.WRSend, Flags: vroce.SendSignaled, SGL: []vroce.SGE{a.MR.SGE(0, 11)}}); err != nil {
		t.Fatal(err)
	}
	if wc := waitCompletions(t, b.CQ, 1, 5*time.Second)[0]; wc.Status != vroce.WCLocLenErr {
		t.Fatalf("receive of 11 bytes into 10: %v", wc.Status)
	}
	if wc := waitCompletions(t, a.CQ, 1, 5*time.Second)[0]; wc.Status != vroce.WCRemInvReqErr {
		t.Fatalf("sender of 11 bytes into 10: %v", wc.Status)
	}
}

// TestSQDDrainsThenResumes: in SQD nothing new starts; once what was in
// flight completes the device reports EventSQDrained; back in RTS the
// held work goes out.
func TestSQDDrainsThenResumes(t *testing.T) {
	a, b, _ := simPair(t, defaultOpts())
	if err := a.QP.Modify(&vroce.QPAttr{State: vroce.QPSSQD}, vroce.QPAttrState); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, a.Dev, vroce.EventSQDrained, func(ev vroce.AsyncEvent) bool { return ev.QP == a.QP })
	sent := a.QP.Stats().TxPackets
	if err := a.QP.PostSend(vroce.SendWR{ID: 1, Opcode: vroce.WRRDMAWrite, Flags: vroce.SendSignaled, SGL: []vroce.SGE{a.MR.SGE(0, 64)}, RemoteAddr: b.MR.Addr(), RKey: b.MR.RKey()}); err != nil {
		t.Fatal(err)
	}
	// PostSend sends what it may before it returns: in SQD, nothing.
	if got := a.QP.Stats().TxPackets; got != sent {
		t.Fatalf("%d packets left while the send queue was drained", got-sent)
	}
	if err := a.QP.Modify(&vroce.QPAttr{State: vroce.QPSRTS}, vroce.QPAttrState); err != nil {
		t.Fatal(err)
	}
	mustSucceed(t, waitCompletions(t, a.CQ, 1, 5*time.Second))
	verbstest.Sync(b)
}
