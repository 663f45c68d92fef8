//go:build linux

package plugin

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vroce.dev/internal/testkit/verbstest"
	"vroce.dev/rsock"
)

// echoed sends n bytes through c to a peer that echoes them, half-closes,
// and checks that the same n bytes come back.
func echoed(c net.Conn, n int) error {
	want := make([]byte, n)
	verbstest.Fill(want, 7)
	go func() {
		c.Write(want)
		c.(interface{ CloseWrite() error }).CloseWrite()
	}()
	if err := c.SetDeadline(time.Now().Add(30 * time.Second)); err != nil {
		return err
	}
	got, err := io.ReadAll(c)
	if err != nil {
		return err
	}
	if !bytes.Equal(got, want) {
		return fmt.Errorf("the echo differs (%d of %d bytes)", len(got), len(want))
	}
	return nil
}

// An rsock stream over plugin:udp in both connection modes: 4 MiB each
// way, byte-exact, and the stream says it crossed vRoCE.
func TestRsockOverPluginUDP(t *testing.T) {
	for _, mode := range []string{rsock.ModeSocket, rsock.ModeCM} {
		t.Run(mode, func(t *testing.T) {
			defer func() {
				ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
				defer cancel()
				require.NoError(t, rsock.Drain(ctx))
			}()
			prov := provider(t, "udp")
			lc := rsock.ListenConfig{Mode: mode, Provider: prov}
			ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
			require.NoError(t, err)
			defer ln.Close()
			go func() {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				defer c.Close()
				io.Copy(c, c)
			}()
			d := rsock.Dialer{Mode: mode, Provider: prov, NoFallback: true, Timeout: 10 * time.Second}
			c, err := d.Dial("tcp", ln.Addr().String())
			require.NoError(t, err)
			defer c.Close()
			assert.Equal(t, "vroce", c.(interface{ Transport() string }).Transport())
			require.NoError(t, echoed(c, 4<<20))
		})
	}
}
