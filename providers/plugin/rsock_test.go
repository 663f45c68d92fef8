//go:build linux

package plugin

import (
	"context"
	"testing"
	"time"

	"vroce.dev/internal/testkit/streamtest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vroce.dev/rsock"
)

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
			go streamtest.ServeEcho(ln)
			d := rsock.Dialer{Mode: mode, Provider: prov, NoFallback: true, Timeout: 10 * time.Second}
			c, err := d.Dial("tcp", ln.Addr().String())
			require.NoError(t, err)
			defer c.Close()
			assert.Equal(t, "vroce", c.(interface{ Transport() string }).Transport())
			require.NoError(t, streamtest.Echoed(c, 4<<20))
		})
	}
}
