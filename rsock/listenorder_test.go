package rsock

import (
	"context"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vroce.dev/vroce"
)

// gatedOpens holds each open of the "udp-gated" provider (the udp
// provider, opened once the test says so) until the test receives from
// it and sends back.
var gatedOpens = make(chan chan struct{})

func init() {
	vroce.RegisterProviderWithTraits("udp-gated", func(cfg vroce.ProviderConfig) (vroce.Provider, error) {
		release := make(chan struct{})
		gatedOpens <- release
		<-release
		return vroce.OpenProvider("udp", cfg)
	}, vroce.ProviderTraits{ProbesFromASocket: true})
}

// Listen on a port given opens the TCP port only once its vRoCE device
// is open and its service listening: while the device opens, a connect
// is refused (not taken, to be told there is no vRoCE service there);
// once Listen returns, a dialer that may not fall back gets a stream.
func TestListenOpensTheTCPPortAfterItsService(t *testing.T) {
	free, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := free.Addr().(*net.TCPAddr)
	require.NoError(t, free.Close())

	type result struct {
		l   net.Listener
		err error
	}
	listened := make(chan result, 1)
	go func() {
		l, err := (&ListenConfig{Provider: "udp-gated"}).Listen(context.Background(), "tcp", addr.String())
		listened <- result{l, err}
	}()
	release := <-gatedOpens // the device is opening
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	t.Cleanup(open) // a failure below must not leave Listen waiting
	_, err = net.DialTCP("tcp", nil, addr)
	require.ErrorIs(t, err, syscall.ECONNREFUSED, "the TCP port listened before its device was open")
	open()
	r := <-listened
	require.NoError(t, r.err)
	served := echoServer(t, r.l)

	c, err := (&Dialer{NoFallback: true, Timeout: 10 * time.Second}).Dial("tcp", addr.String())
	require.NoError(t, err)
	assert.Equal(t, "vroce", transport(c))
	require.NoError(t, roundTrip(c, payload(7, 64<<10)))
	c.Close()
	r.l.Close()
	served.Wait()
	settle(t)
}
