package rsock

import (
	"testing"

	"github.com/stretchr/testify/require"

	"vroce.dev/providers/sim"
	"vroce.dev/vroce"
)

// TestIdleSmallBuffersFollowTheStreams: a stack keeps free two small send
// buffers for each open stream, and at least minIdleSmallBufs, so that
// thousands of streams copying requests (CopyFrom) reuse their buffers
// instead of registering fresh ones; once streams close, what it keeps
// falls back, the rest deregistered.
func TestIdleSmallBuffersFollowTheStreams(t *testing.T) {
	network := sim.NewNetwork(sim.Config{})
	defer network.Close()
	dev, err := vroce.Open(vroce.Config{Provider: "sim", ProviderOptions: network, Addr: "127.0.0.1:4791"})
	require.NoError(t, err)
	defer dev.Close()
	pd, err := dev.AllocPD()
	require.NoError(t, err)
	s := &stack{pd: pd, streams: map[uint32]*stream{}}
	give := func(n int) {
		for range n {
			b, err := s.newBuf(smallBufSize)
			require.NoError(t, err)
			s.putBuf(b)
		}
	}

	// Without streams: the floor, the excess deregistered.
	give(minIdleSmallBufs + 10)
	require.Len(t, s.freeSmall, minIdleSmallBufs)
	require.Equal(t, minIdleSmallBufs, dev.Stats().Resources.MR, "the 10 beyond the floor are deregistered")

	// 3,000 streams: two each are kept.
	const streams = 3000
	for i := range streams {
		s.streams[uint32(i)] = &stream{}
	}
	give(2*streams - minIdleSmallBufs + 10)
	require.Len(t, s.freeSmall, 2*streams)
	require.Equal(t, 2*streams, dev.Stats().Resources.MR)

	// 2,000 of them close: back to the floor.
	for i := range 2000 {
		delete(s.streams, uint32(i))
	}
	s.mu.Lock()
	excess := s.trimIdleSmallLocked()
	s.mu.Unlock()
	require.Len(t, excess, 2*streams-minIdleSmallBufs)
	require.Len(t, s.freeSmall, minIdleSmallBufs)
	for _, b := range excess {
		b.mr.Dereg()
	}
	require.Equal(t, minIdleSmallBufs, dev.Stats().Resources.MR)
}
