package vroce

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vroce.dev/vroce/wire"
)

// ackStallPipe is a pipeProvider whose first ACK stops in Send until the
// device closes the provider, and is then lost: the ACK a receive batch
// had put in its send batch when the program, seeing the completion,
// closed the device.
type ackStallPipe struct {
	*pipeProvider
	once    sync.Once
	held    chan struct{} // closed when the first ACK reaches Send
	closing chan struct{} // closed by Close
	stop    sync.Once
}

func (p *ackStallPipe) Send(pkts []Packet) error {
	for _, pk := range pkts {
		var w wire.Packet
		if wire.Parse(&w, pk.AppendTo(nil)) != nil || w.BTH.Opcode != wire.RCAcknowledge {
			continue
		}
		first := false
		p.once.Do(func() { first = true })
		if first {
			close(p.held)
			<-p.closing
			return net.ErrClosed
		}
	}
	return p.pipeProvider.Send(pkts)
}

func (p *ackStallPipe) Close() error {
	p.stop.Do(func() { close(p.closing) })
	return p.pipeProvider.Close()
}

// A QP that leaves its connection once its program has seen a message
// arrive still acknowledges it, although the ACK its receive batch had
// queued never leaves: by its device's close, by Destroy, or by a move
// to RESET, the sender completes the SEND instead of retrying it against
// a QP that is gone until it fails.
func TestLeavingAfterAReceiveStillAcknowledgesIt(t *testing.T) {
	for _, c := range []struct {
		name  string
		leave func(b pipeEnd) error
	}{
		{"the device closes", func(b pipeEnd) error { return b.dev.Close() }},
		{"the QP is destroyed", func(b pipeEnd) error { return b.qp.Destroy() }},
		{"the QP is reset", func(b pipeEnd) error { return b.qp.Modify(&QPAttr{State: QPSReset}, QPAttrState) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			var stall *ackStallPipe
			a, b := pipeQPsWith(t, func(p *pipeProvider) Provider {
				if p.addr.Addr().String() != "127.0.0.2" {
					return p
				}
				stall = &ackStallPipe{pipeProvider: p, held: make(chan struct{}), closing: make(chan struct{})}
				return stall
			})
			require.NoError(t, b.qp.PostRecv(RecvWR{ID: 1, SGL: []SGE{b.mr.SGE(0, 64)}}))
			require.NoError(t, a.qp.PostSend(SendWR{ID: 2, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, 64)}}))

			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			wc := make([]WorkCompletion, 1)
			n, err := b.cq.PollWait(ctx, wc)
			require.NoError(t, err)
			require.Equal(t, 1, n)
			require.Equal(t, WCSuccess, wc[0].Status, "the receive")
			select {
			case <-stall.held:
			case <-ctx.Done():
				t.Fatal("the receiver sent no ACK")
			}
			require.NoError(t, c.leave(b))

			n, err = a.cq.PollWait(ctx, wc)
			require.NoError(t, err)
			require.Equal(t, 1, n)
			require.Equal(t, uint64(2), wc[0].ID)
			require.Equal(t, WCSuccess, wc[0].Status, "the SEND the QP had received before it went")
		})
	}
}

// sendCounter is a sinkProvider that counts its Send calls.
type sendCounter struct {
	*sinkProvider
	calls atomic.Int32
}

func (p *sendCounter) Send(pkts []Packet) error {
	p.calls.Add(1)
	return p.sinkProvider.Send(pkts)
}

// A device closing with many connected QPs sends their last ACKs
// together, a batch a system call, not one each.
func TestADeviceClosingSendsItsQPsLastACKsTogether(t *testing.T) {
	const qps = 100
	sink := &sendCounter{sinkProvider: &sinkProvider{done: make(chan struct{})}}
	d, err := OpenWithProvider(sink, Config{})
	require.NoError(t, err)
	for range qps {
		qp, _, _ := rtsQPOn(t, d, MTU1024, true)
		qp.mu.Lock()
		qp.resp.acked = true // as if it had acknowledged a request
		qp.mu.Unlock()
	}
	sink.take()
	before := sink.calls.Load()
	require.NoError(t, d.Close())
	assert.Equal(t, qps, acksIn(sink.take()), "every QP's last ACK")
	assert.LessOrEqual(t, int(sink.calls.Load()-before), (qps+sink.BatchSize()-1)/sink.BatchSize(), "sends for them")
}
