package preload

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A request the interposer writes is read back whole; one from another
// build, or malformed, is refused with errBadMessage.
func TestRequests(t *testing.T) {
	peer := netip.MustParseAddrPort("[2001:db8::7]:443")
	m, err := decodeRequest(message{op: opConnect, peer: peer}.encode())
	require.NoError(t, err)
	assert.Equal(t, peer, m.peer)
	v4 := netip.MustParseAddrPort("192.0.2.1:80")
	m, err = decodeRequest(message{op: opConnect, peer: netip.AddrPortFrom(netip.AddrFrom16(v4.Addr().As16()), 80)}.encode())
	require.NoError(t, err)
	assert.Equal(t, v4, m.peer, "IPv4-mapped travels as IPv4")

	bad := message{op: opConnect, peer: peer}.encode()
	bad[0] ^= 1
	_, err = decodeRequest(bad)
	assert.ErrorIs(t, err, errBadMessage)
	_, err = decodeRequest(message{op: opConnect}.encode())
	assert.ErrorIs(t, err, errBadMessage, "connect to nowhere")
	_, err = decodeRequest(message{op: 99}.encode())
	assert.ErrorIs(t, err, errBadMessage)
	_, err = decodeRequest(bad[:10])
	assert.ErrorIs(t, err, errBadMessage)
}

// refused reports whether a decoder refused its input, failing t if it
// did so with anything but errBadMessage.
func refused(t *testing.T, err error) bool {
	if err != nil && !errors.Is(err, errBadMessage) {
		t.Fatalf("untyped error %v", err)
	}
	return err != nil
}

func FuzzDecodeRequest(f *testing.F) {
	f.Add(message{op: opConnect, peer: netip.MustParseAddrPort("10.0.0.1:80")}.encode())
	f.Add(message{op: opListen}.encode())
	f.Add(message{op: opHello, flags: 42}.encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeRequest(b)
		if refused(t, err) {
			return
		}
		again, err := decodeRequest(m.encode())
		if err != nil || again.op != m.op || again.flags != m.flags {
			t.Fatalf("%+v does not survive a round trip: %+v, %v", m, again, err)
		}
	})
}

// The daemon's counters reach vroce-run whole; a reply of another size
// or without the header's magic is refused with errBadMessage.
func TestStatsReply(t *testing.T) {
	want := Stats{Processes: 2, VRoCEConns: 3, VRoCEBytes: 1 << 40, TCPConns: 5, TCPBytes: 6, VRoCECM: 7, Resets: 8}
	reply := append(message{op: opStats}.encode(), want.encode()...)
	got, err := decodeStatsReply(reply)
	require.NoError(t, err)
	assert.Equal(t, want, got)

	_, err = decodeStatsReply(reply[:len(reply)-1])
	assert.ErrorIs(t, err, errBadMessage, "a short reply")
	bad := append([]byte(nil), reply...)
	bad[0] ^= 1
	_, err = decodeStatsReply(bad)
	assert.ErrorIs(t, err, errBadMessage, "another magic")
}

func FuzzDecodeStatsReply(f *testing.F) {
	f.Add(append(message{op: opStats}.encode(), Stats{Processes: 1, VRoCEBytes: 4096}.encode()...))
	f.Add(message{op: opStats}.encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := decodeStatsReply(b)
		if refused(t, err) {
			return
		}
		again, err := decodeStatsReply(append(b[:messageSize:messageSize], s.encode()...))
		if err != nil || again != s {
			t.Fatalf("%+v does not survive a round trip: %+v, %v", s, again, err)
		}
	})
}
