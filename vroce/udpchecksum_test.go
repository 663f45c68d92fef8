package vroce

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"vroce.dev/vroce/wire"
)

// checksummedPipe is a pipeProvider that says it verifies UDP checksums
// (when verifies is set), and that notes the ICRC of each packet it sends,
// then delivers the packet with a wrong one.
type checksummedPipe struct {
	*pipeProvider
	verifies bool
	mu       sync.Mutex
	icrcs    []uint32 // the ICRC each packet left with
}

func (p *checksummedPipe) VerifiesUDPChecksum() bool { return p.verifies }

func (p *checksummedPipe) Send(pkts []Packet) error {
	spoilt := make([]Packet, len(pkts))
	p.mu.Lock()
	for i, pk := range pkts {
		b := pk.AppendTo(nil)
		icrc := b[len(b)-wire.ICRCLen:]
		p.icrcs = append(p.icrcs, binary.LittleEndian.Uint32(icrc))
		icrc[0] ^= 0x5a
		spoilt[i] = Packet{Data: b, Addr: pk.Addr}
	}
	p.mu.Unlock()
	return p.pipeProvider.Send(spoilt)
}

func (p *checksummedPipe) sentICRCs() []uint32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]uint32(nil), p.icrcs...)
}

// Two QPs that agreed to leave the ICRC to the UDP checksum send zeros
// where it goes and take packets whatever it says: a SEND whose ICRC the
// path spoilt arrives. The control: the same QPs without the agreement
// send ICRCs and drop every spoilt packet as corrupt.
func TestQPsThatAgreeLeaveTheICRCToTheUDPChecksum(t *testing.T) {
	for _, agreed := range []bool{true, false} {
		var pipes []*checksummedPipe
		a, b := pipeQPsAt(t, func(p *pipeProvider) Provider {
			c := &checksummedPipe{pipeProvider: p, verifies: true}
			pipes = append(pipes, c)
			return c
		}, QPAttr{UDPChecksum: agreed}, QPAttrUDPChecksum)
		require.Equal(t, agreed, a.qp.Attr().UDPChecksum)
		require.True(t, a.dev.Attr().UDPChecksum, "the device reports its provider's checksum")

		copy(a.mr.Bytes(), "a spoilt ICRC")
		require.NoError(t, b.qp.PostRecv(RecvWR{ID: 1, SGL: []SGE{b.mr.SGE(0, 64)}}))
		require.NoError(t, a.qp.PostSend(SendWR{ID: 2, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, 13)}}))
		if !agreed {
			require.True(t, eventually(10*time.Second, func() bool { return b.dev.Stats().RxBadICRC > 0 }), "the spoilt SEND counted as corrupt")
			require.NotZero(t, pipes[0].sentICRCs()[0], "the SEND's ICRC")
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		wc := make([]WorkCompletion, 1)
		n, err := b.cq.PollWait(ctx, wc)
		cancel()
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Equal(t, WCSuccess, wc[0].Status)
		require.Equal(t, "a spoilt ICRC", string(b.mr.Bytes()[:wc[0].ByteLen]))
		require.Zero(t, b.dev.Stats().RxBadICRC)
		for _, p := range pipes {
			for i, icrc := range p.sentICRCs() {
				require.Zero(t, icrc, "packet %d from %v", i, p.addr)
			}
		}
	}
}

// Only a device whose provider verifies UDP checksums may leave the ICRC
// out: asked on another, the move to RTR fails with a clear error.
func TestTheICRCStaysWhereTheProviderDoesNotVerify(t *testing.T) {
	a, b := newPipePair()
	dev, err := OpenWithProvider(&checksummedPipe{pipeProvider: a, verifies: false}, Config{})
	require.NoError(t, err)
	t.Cleanup(func() { dev.Close() })
	b.Close()
	require.False(t, dev.Attr().UDPChecksum)
	pd, _ := dev.AllocPD()
	cq, _ := dev.CreateCQ(8)
	qp, err := pd.CreateQP(QPInitAttr{Type: RC, SendCQ: cq, RecvCQ: cq, Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	require.NoError(t, qp.Modify(&QPAttr{State: QPSInit}, QPAttrState|QPAttrAccessFlags))
	rtr := QPAttr{State: QPSRTR, Dest: b.addr, PathMTU: MTU1024, DestQPN: 5, MaxDestRdAtomic: 1, MinRNRTimer: 1, UDPChecksum: true}
	mask := QPAttrState | QPAttrAV | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN | QPAttrMaxDestRdAtomic | QPAttrMinRNRTimer
	err = qp.Modify(&rtr, mask|QPAttrUDPChecksum)
	require.True(t, errors.Is(err, ErrInvalid), "%v", err)
	require.ErrorContains(t, err, "UDP checksum")
	require.NoError(t, qp.Modify(&rtr, mask), "the same move, keeping the ICRC")
}
