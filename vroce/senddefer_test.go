package vroce

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// deferState is a requester with a window of 200 packets, 1 KiB
// packets, and messages of 64 packets posted: the first being sent.
type deferState struct {
	r *requester
	q *sendQueue
}

func newDeferState(inFlight, queuedMessages int) deferState {
	s := deferState{r: &requester{}, q: &sendQueue{ring: make([]sendWQE, 8)}}
	s.r.cc.init()
	s.r.cc.cwnd = 200
	s.r.sb.start(1000)
	s.r.nextPSN = psnAdd(1000, inFlight)
	for i := range queuedMessages {
		w := s.q.slot(uint64(i))
		w.op, w.length = WRRDMAWrite, 64<<10
		if i == 0 {
			w.assigned, w.psn, w.npsn = true, 1000, inFlight+8 // 8 packets of it left to send
		}
	}
	s.q.tail = uint64(queuedMessages)
	return s
}

func (s deferState) defersSend(mtu int) bool { return s.r.defersSend(s.q, mtu) }

// A window-limited sender waits until a burst's worth of the window is
// open, while what is queued would fill one; otherwise it sends at once.
func TestSendDefersUntilABurstFits(t *testing.T) {
	const mtu = 1024
	assert.True(t, newDeferState(195, 2).defersSend(mtu), "5 packets of room, 72 queued: wait for the ACKs on their way")
	assert.False(t, newDeferState(200-sendBurst, 2).defersSend(mtu), "a burst of room: send")
	assert.False(t, newDeferState(195, 1).defersSend(mtu), "only 8 packets queued: send them now, nothing would fill a burst")
	assert.False(t, newDeferState(0, 2).defersSend(mtu), "nothing in flight: no ACK is coming to wake the sender")

	small := newDeferState(3, 2)
	small.r.cc.cwnd = 4 // a burst would be a whole window
	assert.False(t, small.defersSend(mtu), "a tiny window sends packet by packet")
}
