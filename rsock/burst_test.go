package rsock

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestManyStreamsReceiveAtOnce: 200 streams from one listener to one
// dialer each get 256 KiB at the same moment. The dialer's SRQ keeps
// only two receives posted once its first 32 are spent (left to grow, it
// kept up on an idle machine and drew no RNR NAK under CI's load), so
// most streams' first packets draw RNR NAKs while the messages that got
// receives finish; every byte must land. (The engine's peer budget once
// counted the refused QPs' retries and the packets the dialer held
// behind them, and the messages holding the receives could not finish:
// through rsock-proxy, 200 streams stopped dead about one run in five.)
func TestManyStreamsReceiveAtOnce(t *testing.T) {
	const streams, size = 200, 256 << 10
	l := listen(t, &ListenConfig{Mode: ModeSocket}, "127.0.0.1:0")
	d := &Dialer{Mode: ModeSocket}
	clients := make([]net.Conn, streams)
	servers := make([]net.Conn, streams)
	for i := range streams {
		clients[i], servers[i] = pair(t, l, d)
	}
	dialer := clients[0].(*Conn).s.st
	for _, c := range clients {
		require.Same(t, dialer, c.(*Conn).s.st, "every dialed stream shares one stack")
	}
	dialer.mu.Lock()
	dialer.target, dialer.maxTarget = 2, 2
	dialer.mu.Unlock()
	data := payload(7, size)
	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 2*streams)
	for i := range streams {
		wg.Go(func() {
			<-start
			if _, err := servers[i].Write(data); err != nil {
				errs <- err
			}
		})
		wg.Go(func() {
			got := make([]byte, size)
			clients[i].SetReadDeadline(time.Now().Add(60 * time.Second))
			if _, err := io.ReadFull(clients[i], got); err != nil {
				errs <- err
				return
			}
			if !bytes.Equal(got, data) {
				errs <- fmt.Errorf("stream %d: the 256 KiB read differ from what was written", i)
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	if n := len(errs); n > 0 {
		t.Errorf("%d of %d reads and writes failed; the first: %v", n, 2*streams, <-errs)
	}
	var refused uint64
	for _, c := range servers {
		refused += c.(*Conn).Info().RNRWaits
	}
	if refused == 0 {
		t.Error("no message was refused for want of a receive: the burst did not outrun the dialer's SRQ, and the test shows nothing")
	}
	assert.LessOrEqual(t, refused, dialer.dev.Stats().QPs.RNRNAKsSent, "the writers waited on RNR NAKs the dialer did not send")
	for i := range streams {
		clients[i].Close()
		servers[i].Close()
	}
	l.Close()
	settle(t)
}
