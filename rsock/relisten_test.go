package rsock

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A service that closes its listener and listens again on the same port
// (iperf3 does between tests) serves vRoCE clients again.
func TestServeAgainOnTheSamePort(t *testing.T) {
	defer settle(t)
	tl, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	addr := tl.Addr().(*net.TCPAddr)
	for round := range 3 {
		if round > 0 {
			tl, err = net.ListenTCP("tcp", addr)
			require.NoError(t, err, "round %d: the port is free again", round)
		}
		ln, err := (&ListenConfig{}).Serve(tl)
		require.NoError(t, err)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			io.Copy(c, c)
			c.Close()
		}()
		d := Dialer{NoFallback: true, Timeout: 10 * time.Second}
		c, err := d.DialContext(context.Background(), "tcp", addr.String())
		require.NoError(t, err, "round %d", round)
		_, err = c.Write([]byte("ping"))
		require.NoError(t, err)
		b := make([]byte, 4)
		_, err = io.ReadFull(c, b)
		require.NoError(t, err)
		c.Close()
		ln.Close()
	}
}
