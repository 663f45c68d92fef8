package rsock

import (
	"bytes"
	"io"
	"net"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Concurrent request-and-answer streams send about one packet a message
// each way, as a single ping-pong does: the ACK of a request rides on its
// answer and the answer's on the next request (TCP's delayed ACK in its
// ping-pong mode). While one stream's reader received for the device,
// the others' ACKs had left on their own, one for every message: eight 1
// KiB echo streams through two rsock-proxys sent twice the packets TCP's
// chain did, and spent twice its CPU a request. The positive control:
// every answer comes back whole. (The ACKs wait for an answer for a
// fixed time, ackHold: the bound below leaves room for a host slow
// enough to miss it now and then.)
func TestConcurrentConversationsCarryTheirACKs(t *testing.T) {
	l := listen(t, &ListenConfig{}, "127.0.0.1:0")
	srv := echoServer(t, l)
	const streams, rounds = 4, 500
	conns := make([]net.Conn, streams)
	for i := range conns {
		c, err := (&Dialer{}).Dial("tcp", l.Addr().String())
		require.NoError(t, err)
		conns[i] = c
	}
	var wg sync.WaitGroup
	errs := make(chan error, streams)
	for i, c := range conns {
		wg.Go(func() {
			req, got := payload(uint64(i), 1024), make([]byte, 1024)
			for range rounds {
				if _, err := c.Write(req); err != nil {
					errs <- err
					return
				}
				if _, err := io.ReadFull(c, got); err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(got, req) {
					errs <- io.ErrUnexpectedEOF
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	var sent uint64
	for _, c := range conns {
		sent += c.(*Conn).Info().TxPackets
	}
	for _, c := range conns {
		c.Close()
	}
	l.Close()
	srv.Wait()
	t.Logf("%d packets sent for %d requests", sent, streams*rounds)
	// Each ACK alone, four streams sent 1.6 packets a request; under the
	// race detector and beside two busy loops, their ACKs riding, 1.09-1.19.
	assert.LessOrEqual(t, sent, uint64(streams*rounds*27/20), "the clients' ACKs did not ride on their requests")
}
