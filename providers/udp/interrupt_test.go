package udp

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vroce.dev/vroce"
)

// twoProviders opens a receiving and a sending provider on loopback, and
// buffers for the receiver.
func twoProviders(t *testing.T) (rx, tx *Provider, pkts []vroce.Packet) {
	t.Helper()
	rx, err := Listen("127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { rx.Close() })
	tx, err = Listen("127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { tx.Close() })
	pkts = make([]vroce.Packet, 4)
	for i := range pkts {
		pkts[i].Data = make([]byte, vroce.MaxPacketSize)
	}
	return rx, tx, pkts
}

// InterruptRecv ends a receive parked on an idle socket without an error,
// one that starts after it at once, and leaves no deadline behind: the
// datagram that comes next is received as ever.
func TestInterruptRecvEndsAReceiveAndLeavesTheSocketAsItWas(t *testing.T) {
	rx, tx, pkts := twoProviders(t)

	// Inside a receive: after delivering a lone datagram it waits in the
	// poller for the next (or is on its way there, which the interrupt's
	// deadline catches the same way).
	done := make(chan error, 1)
	inside := make(chan struct{})
	delivered := 0
	go func() {
		done <- rx.RecvEach(pkts, func(n int) bool {
			if delivered += n; delivered == 1 {
				close(inside)
			}
			return true
		})
	}()
	require.NoError(t, tx.Send([]vroce.Packet{{Data: []byte("first"), Addr: rx.LocalAddr()}}))
	<-inside
	rx.InterruptRecv()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("InterruptRecv did not end a waiting RecvEach")
	}
	assert.Equal(t, 1, delivered)

	// An interrupt before the receive: Recv returns at once, empty.
	rx.InterruptRecv()
	n, err := rx.Recv(pkts)
	require.NoError(t, err)
	assert.Zero(t, n)

	// And then the socket receives as before.
	require.NoError(t, tx.Send([]vroce.Packet{{Data: []byte("after the interrupt"), Addr: rx.LocalAddr()}}))
	for n == 0 {
		n, err = rx.Recv(pkts)
		require.NoError(t, err)
	}
	assert.Equal(t, "after the interrupt", string(pkts[0].Data))
}

// RecvEach returns nil, keeping what it has not delivered, once deliver
// asks for no more.
func TestRecvEachStopsWhenDeliverSaysSo(t *testing.T) {
	rx, tx, pkts := twoProviders(t)
	require.NoError(t, tx.Send([]vroce.Packet{{Data: []byte("one"), Addr: rx.LocalAddr()}}))
	calls := 0
	require.NoError(t, rx.RecvEach(pkts, func(n int) bool { calls++; return false }))
	assert.Equal(t, 1, calls)
	assert.Equal(t, "one", string(pkts[0].Data))
}
