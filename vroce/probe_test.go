package vroce_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"vroce.dev/providers/sim"
	"vroce.dev/vroce"
)

// TestLossProbesToASlowPeerAreSpaced: a fresh QP (no RTT sample: a 5 ms
// PTO, a 10 ms RTO) sends one SEND to a peer 30 ms away, as a TCG guest
// running rxe is. Its first packet is lost to no one, so nothing but the
// timers moves: probes at the PTO, then the timeouts, each resending
// one packet and doubling. Before, the probe deadline stayed at a quarter
// RTO before the RTO once reached, and every timer wake sent another
// copy: 117 packets in 40 ms against rxe.
func TestLossProbesToASlowPeerAreSpaced(t *testing.T) {
	for _, sr := range []bool{true, false} {
		t.Run(fmt.Sprintf("selective repeat %v", sr), func(t *testing.T) {
			o := defaultOpts()
			o.SelectiveRepeat, o.PiggybackACK = sr, sr
			o.Sim = sim.Config{Delay: 15 * time.Millisecond}
			a, b, _ := simPair(t, o)
			if err := b.QP.PostRecv(vroce.RecvWR{ID: 1, SGL: []vroce.SGE{b.MR.SGE(0, 64)}}); err != nil {
				t.Fatal(err)
			}
			if err := a.QP.PostSend(vroce.SendWR{ID: 1, Opcode: vroce.WRSend, Flags: vroce.SendSignaled, SGL: []vroce.SGE{a.MR.SGE(0, 64)}}); err != nil {
				t.Fatal(err)
			}
			mustSucceed(t, waitCompletions(t, a.CQ, 1, 5*time.Second))
			s := a.QP.Stats()
			// In the 30 ms before the ACK: probes a PTO apart and the last
			// a quarter RTO before the RTO (5 and 7.5 ms), then the
			// timeouts at 10 and 30 ms (10 + 20), the first resending one
			// packet; a slow host may add one more timeout, never a burst.
			assert.LessOrEqual(t, s.TailProbes, uint64(2), "probes")
			assert.LessOrEqual(t, s.Retransmits, uint64(5), "resends of one packet in one RTT (stats %+v)", s)
			assert.LessOrEqual(t, b.QP.Stats().Duplicates, uint64(5), "duplicates at the responder")
		})
	}
}
