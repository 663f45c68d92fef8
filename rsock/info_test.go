package rsock

import (
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vroce.dev/providers/sim"
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

// Over a network that loses packets, Info says how the stream recovered:
// the retransmissions, and which of them SACKs and tail probes drew,
// as its QP counted them.
func TestInfoSaysHowLossWasRepaired(t *testing.T) {
	network := sim.NewNetwork(sim.Config{Seed: 5, Loss: 0.05})
	defer network.Close()
	l := listen(t, &ListenConfig{Provider: "sim", ProviderOptions: network, DeviceAddr: "127.0.0.1:0"}, "127.0.0.1:0")
	served := echoServer(t, l)
	c, err := (&Dialer{Provider: "sim", ProviderOptions: network}).Dial("tcp", l.Addr().String())
	require.NoError(t, err)
	require.NoError(t, roundTrip(c, payload(1, 1<<20)))

	info := c.(*Conn).Info()
	q := c.(*Conn).s.qp.Stats()
	assert.Positive(t, info.Retransmits, "5% loss and nothing sent again")
	assert.Positive(t, info.FastRetransmits+info.TailProbes, "no SACK or probe drew a resend")
	assert.Equal(t, q.FastRetransmits, info.FastRetransmits)
	assert.Equal(t, q.TailProbes, info.TailProbes)
	assert.Equal(t, q.SpuriousTimeouts, info.SpuriousTimeouts)
	assert.LessOrEqual(t, info.TailProbes, info.Retransmits, "every probe is a packet sent again")

	c.Close()
	l.Close()
	served.Wait()
	settle(t)
}
