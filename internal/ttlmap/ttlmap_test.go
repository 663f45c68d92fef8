package ttlmap

import (
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// An entry counts for its TTL after Put, not at or after it; Delete
// forgets it at once.
func TestEntriesCountForTheirTTL(t *testing.T) {
	m := Map[netip.AddrPort, int]{TTL: time.Second, Max: 8}
	a := netip.MustParseAddrPort("10.0.0.1:7000")
	t0 := time.Unix(1000, 0)
	_, ok := m.Get(a, t0)
	assert.False(t, ok, "never put")
	m.Put(a, 7, t0)
	v, ok := m.Get(a, t0.Add(time.Second-time.Millisecond))
	assert.True(t, ok)
	assert.Equal(t, 7, v)
	_, ok = m.Get(a, t0.Add(time.Second))
	assert.False(t, ok, "stale")
	m.Put(a, 7, t0)
	m.Delete(a)
	_, ok = m.Get(a, t0)
	assert.False(t, ok, "deleted")
	m.Put(a, 7, t0)
	m.SetTTL(time.Hour)
	_, ok = m.Get(a, t0.Add(time.Minute))
	assert.True(t, ok, "a longer TTL counts for what is kept")
}

// At most Max entries are kept: a new key past it is not kept while the
// others are fresh, and takes an expired one's place; expired entries
// all go to make room.
func TestAtMostMaxAreKept(t *testing.T) {
	const max = 1024
	m := Map[netip.AddrPort, struct{}]{TTL: time.Second, Max: max}
	t0 := time.Unix(1000, 0)
	for i := range max {
		m.Put(netip.AddrPortFrom(netip.MustParseAddr("10.1.0.1"), uint16(i+1)), struct{}{}, t0)
	}
	require.Equal(t, max, m.Len())
	late := netip.MustParseAddrPort("10.2.0.1:9")
	m.Put(late, struct{}{}, t0.Add(time.Millisecond))
	_, ok := m.Get(late, t0.Add(time.Millisecond))
	assert.False(t, ok, "no room while the others are fresh")
	require.Equal(t, max, m.Len())
	m.Put(late, struct{}{}, t0.Add(time.Second))
	_, ok = m.Get(late, t0.Add(time.Second))
	assert.True(t, ok, "room once they are stale")
	assert.Equal(t, 1, m.Len(), "expired entries make room")
}
