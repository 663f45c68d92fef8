package wire

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestXOrder checks what xPowInverse relies on: x^(2^32-1) = 1 modulo
// the CRC polynomial, and x^k times x^-k is one.
func TestXOrder(t *testing.T) {
	require.Equal(t, uint32(polyOne), xPow(xOrder))
	for _, k := range []uint64{1, 8, 8 * 1000, 8 * 4150, 12345678} {
		assert.Equal(t, uint32(polyOne), multModP(xPow(k), xPowInverse(k)), "x^%d x^-%d", k, k)
	}
}

// TestIDForRegisterInvertsEveryID: each of the 65,536 IDs is found again
// from the CRC register its two bytes leave.
func TestIDForRegisterInvertsEveryID(t *testing.T) {
	for id := range 1 << 16 {
		got, ok := idForRegister(raw2(byte(id>>8), byte(id)))
		if !ok || got != uint16(id) {
			t.Fatalf("ID %#04x: found %#04x, %v", id, got, ok)
		}
	}
}

// sealWithID builds a SEND_ONLY of n payload bytes on flow as a sender
// that numbers its IPv4 IDs would: the ICRC over the real header.
func sealWithID(t testing.TB, flow Flow, n int, id uint16) []byte {
	t.Helper()
	p := Packet{BTH: BTH{Opcode: RCSendOnly, PKey: DefaultPKey, DestQP: 0x11, PSN: 5}, Payload: make([]byte, n)}
	for i := range p.Payload {
		p.Payload[i] = byte(i * 13)
	}
	b := make([]byte, Len(RCSendOnly, n))
	_, err := p.Encode(b)
	require.NoError(t, err)
	var hs [MaxHeaderSpace]byte
	ip, udp, ok := flow.Headers(&hs, len(b))
	require.True(t, ok)
	if len(ip) == ipv4HdrLen {
		binary.BigEndian.PutUint16(ip[4:], id)
	}
	crc, ok := ICRC(ip, udp, b)
	require.True(t, ok)
	binary.LittleEndian.PutUint32(b[len(b)-ICRCLen:], crc)
	return b
}

var idFlow = Flow{Src: netip.MustParseAddrPort("10.0.0.1:55410"), Dst: netip.MustParseAddrPort("10.0.0.2:4791")}

// TestCheckUnknownIDFindsTheSendersID: whatever ID the sender used, and
// whatever the packet's length, the check finds it; ID 0 takes the full
// check.
func TestCheckUnknownIDFindsTheSendersID(t *testing.T) {
	for _, n := range []int{0, 13, 64, 1024, 4096} {
		for _, id := range []uint16{0, 1, 0x15ec, 0x8000, 0xffff} {
			pkt := sealWithID(t, idFlow, n, id)
			got, ok := idFlow.CheckUnknownID(pkt)
			assert.True(t, ok, "payload %d, ID %#x", n, id)
			assert.Equal(t, id, got, "payload %d", n)
			assert.Equal(t, id == 0, idFlow.Check(pkt), "the full check passes only ID 0 (payload %d, ID %#x)", n, id)
		}
	}
}

// TestCheckUnknownIDRefusesDamage: a packet changed anywhere the ICRC
// covers fails, though the ID is free: here every bit of a 64-byte
// packet, and the addresses the flow rebuilds.
func TestCheckUnknownIDRefusesDamage(t *testing.T) {
	pkt := sealWithID(t, idFlow, 64, 0x1234)
	for bit := range 8 * len(pkt) {
		if bit/8 == 4 { // resv8a, which the ICRC masks
			continue
		}
		b := append([]byte(nil), pkt...)
		b[bit/8] ^= 1 << (bit % 8)
		if _, ok := idFlow.CheckUnknownID(b); ok {
			t.Errorf("bit %d flipped: accepted", bit)
		}
	}
	other := idFlow
	other.Src = netip.MustParseAddrPort("10.0.0.3:55410")
	_, ok := other.CheckUnknownID(pkt)
	assert.False(t, ok, "from another address")
	other = idFlow
	other.Src = netip.MustParseAddrPort("10.0.0.1:55411")
	_, ok = other.CheckUnknownID(pkt)
	assert.False(t, ok, "from another port")
}

// TestCheckUnknownIDOnIPv6IsCheck: IPv6 has no ID to solve for.
func TestCheckUnknownIDOnIPv6IsCheck(t *testing.T) {
	flow := Flow{Src: netip.MustParseAddrPort("[fe80::1]:55410"), Dst: netip.MustParseAddrPort("[fe80::2]:4791")}
	pkt := sealWithID(t, flow, 100, 0)
	_, ok := flow.CheckUnknownID(pkt)
	require.True(t, ok)
	pkt[20] ^= 1
	_, ok = flow.CheckUnknownID(pkt)
	assert.False(t, ok)
}

// BenchmarkCheckUnknownID is the check of every packet an rxe peer sends:
// its ID is never 0.
func BenchmarkCheckUnknownID(b *testing.B) {
	pkt := sealWithID(&testing.T{}, idFlow, 1024, 0x15ec)
	s := Sealer{Flow: idFlow}
	for b.Loop() {
		if _, ok := s.CheckUnknownID(pkt); !ok {
			b.Fatal("refused")
		}
	}
}

// TestCheckCopyIsCheckWithTheCopy: checking a packet while copying its
// payload out gives Check's verdict (CheckUnknownID's, asked) and the
// payload's bytes, at every size a fold takes or leaves, whatever the
// sender's ID; a bit flipped in the headers, the payload or the ICRC
// fails it, copied or not.
func TestCheckCopyIsCheckWithTheCopy(t *testing.T) {
	at := RCSendOnly.HeaderLen()
	for _, n := range []int{0, 4, 13, 16, 60, 64, 100, 1023, 1344, 4096} { // 13 and 1023: a pad
		for _, id := range []uint16{0, 0x15ec} {
			pkt := sealWithID(t, idFlow, n, id)
			for _, unknownID := range []bool{false, true} {
				s := Sealer{Flow: idFlow}
				dst := make([]byte, n)
				want := id == 0 || unknownID
				assert.Equal(t, want, s.CheckCopy(pkt, at, dst, unknownID), "payload %d, ID %#x, unknown ID %v", n, id, unknownID)
				assert.Equal(t, pkt[at:at+n], dst, "payload %d: the copy", n)
				for _, flip := range []int{1, at + n/2, len(pkt) - 1} { // a header, the payload (the ICRC when none), the ICRC
					b := append([]byte(nil), pkt...)
					b[flip] ^= 0x20
					assert.False(t, s.CheckCopy(b, at, dst, unknownID), "payload %d, ID %#x: byte %d flipped", n, id, flip)
				}
			}
		}
	}
	// The payload must lie between the headers and the ICRC.
	pkt := sealWithID(t, idFlow, 64, 0)
	s := Sealer{Flow: idFlow}
	for _, c := range []struct{ at, n int }{{BTHLen - 1, 4}, {at, 65}, {len(pkt), 0}} {
		dst := make([]byte, c.n)
		assert.False(t, s.CheckCopy(pkt, c.at, dst, false), "payload of %d at %d", c.n, c.at)
		assert.Equal(t, make([]byte, c.n), dst, "nothing copied")
	}
}

// BenchmarkCheckCopy is a stream receiver's work on a packet's payload at
// MTU 1500: checked, then copied into a receive buffer, against
// CheckCopy's one pass. The packets lie as a GRO receive leaves them,
// 1,400 bytes apart in 64 KiB, and go to a 256 KiB receive buffer in
// turn, so that neither stays in the first-level cache.
func BenchmarkCheckCopy(b *testing.B) {
	const payload = 1344
	one := sealWithID(b, idFlow, payload, 0)
	at := RCSendOnly.HeaderLen()
	in := make([]byte, 64<<10)
	var pkts [][]byte
	for off := 0; off+len(one) <= len(in); off += 1400 {
		pkts = append(pkts, in[off:off+len(one)])
		copy(pkts[len(pkts)-1], one)
	}
	recv := make([]byte, 256<<10)
	for _, way := range []string{"check, then copy", "CheckCopy"} {
		b.Run(way, func(b *testing.B) {
			s := Sealer{Flow: idFlow}
			b.SetBytes(payload)
			i, to := 0, 0
			for b.Loop() {
				pkt, dst := pkts[i], recv[to:to+payload]
				ok := false
				if way == "CheckCopy" {
					ok = s.CheckCopy(pkt, at, dst, false)
				} else if ok = s.Check(pkt); ok {
					copy(dst, pkt[at:at+payload])
				}
				if !ok {
					b.Fatal("refused")
				}
				if i++; i == len(pkts) {
					i = 0
				}
				if to += payload; to+payload > len(recv) {
					to = 0
				}
			}
		})
	}
}
