package vroce_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vroce.dev/internal/testkit/verbstest"
	"vroce.dev/providers/sim"
	"vroce.dev/vroce"
)

// Each packet a QP sends counts once, against that QP: READ responses
// that fill the receive batch they are built in (two QPs answer READs of
// 1,024 packets each in the same batches) are not counted again, nor
// charged to whichever QP found the batch full. On a lossless network
// what one end sends is what the other accepts.
func TestTxPacketsCountEachPacketOnceForItsQP(t *testing.T) {
	network := sim.NewNetwork(sim.Config{})
	t.Cleanup(network.Close)
	o := verbstest.DefaultOpts()
	o.BufSize = 1 << 20
	da := verbstest.OpenDevice(t, vroce.Config{Provider: "sim", Addr: "127.0.0.1:4791", ProviderOptions: network})
	db := verbstest.OpenDevice(t, vroce.Config{Provider: "sim", Addr: "127.0.0.2:4791", ProviderOptions: network})
	a1, b1 := verbstest.Pair(t, da, db, o)
	a2, b2 := verbstest.Pair(t, da, db, o)
	for i, a := range []*verbstest.Node{a1, a2} {
		b := []*verbstest.Node{b1, b2}[i]
		require.NoError(t, a.QP.PostSend(vroce.SendWR{ID: uint64(i), Opcode: vroce.WRRDMARead, Flags: vroce.SendSignaled,
			SGL: []vroce.SGE{a.MR.SGE(0, o.BufSize)}, RemoteAddr: b.MR.Addr(), RKey: b.MR.RKey()}))
	}
	for _, a := range []*verbstest.Node{a1, a2} {
		verbstest.MustSucceed(t, verbstest.WaitCompletions(t, a.CQ, 1, 10*time.Second))
	}
	for i, pair := range [][2]*verbstest.Node{{a1, b1}, {a2, b2}} {
		a, b := pair[0], pair[1]
		// A late resend may still be on its way: give both ends time to
		// agree, then compare what they say.
		verbstest.Eventually(func() bool {
			return a.QP.Stats().TxPackets == b.QP.Stats().RxPackets && b.QP.Stats().TxPackets == a.QP.Stats().RxPackets
		}, 10*time.Second)
		as, bs := a.QP.Stats(), b.QP.Stats()
		name := fmt.Sprintf("pair %d", i+1)
		assert.GreaterOrEqual(t, bs.TxPackets, uint64(1024), "%s: the responder sent 1,024 READ responses at least", name)
		assert.Equal(t, as.RxPackets, bs.TxPackets, "%s: the responder's sent against the requester's accepted", name)
		assert.Equal(t, bs.RxPackets, as.TxPackets, "%s: the requester's sent against the responder's accepted", name)
	}
}
