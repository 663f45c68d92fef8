package rsock

import (
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Info reports the stream's own transport: after a transfer, a
// round-trip time, a window, a path MTU and packets both ways.
func TestInfoReportsTheTransport(t *testing.T) {
	c, s := streamPair(t)
	go io.Copy(s, s)
	go c.Write(make([]byte, 1<<20))
	_, err := io.ReadFull(c, make([]byte, 1<<20)) // the echo: both ways done
	require.NoError(t, err)
	info := c.(*Conn).Info()
	assert.Positive(t, info.RTT)
	assert.Positive(t, info.CWnd)
	assert.Positive(t, info.MTU)
	assert.Positive(t, info.TxPackets)
	assert.Positive(t, info.RxPackets, "ACKs came back")
	assert.Equal(t, uint64(1<<20), info.BytesOut)
	assert.Equal(t, uint64(1<<20), info.BytesIn)
}
