package wire_test

import (
	"bytes"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"vroce.dev/vroce/wire"
)

// icrcReference is the ICRC computed the slow, obvious way: the pseudo
// packet built in full (eight 0xFF bytes, then the headers with their
// variant fields set to ones), then one CRC-32 over it.
func icrcReference(ip, udp, pkt []byte) uint32 {
	b := []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	h := append([]byte(nil), ip...)
	if h[0]>>4 == 4 {
		h[1], h[8], h[10], h[11] = 0xff, 0xff, 0xff, 0xff
	} else {
		h[0] |= 0x0f
		h[1], h[2], h[3], h[7] = 0xff, 0xff, 0xff, 0xff
	}
	b = append(b, h...)
	b = append(b, udp[:6]...)
	b = append(b, 0xff, 0xff)
	bth := append([]byte(nil), pkt[:wire.BTHLen]...)
	bth[4] = 0xff
	b = append(b, bth...)
	b = append(b, pkt[wire.BTHLen:len(pkt)-wire.ICRCLen]...)
	return crc32.ChecksumIEEE(b)
}

// ICRC agrees with the reference for random headers of every IPv4 length
// (20 to 60 bytes, so the masked prefix ends at every offset the fast path
// steps by) and IPv6, and random payloads of every length up to 600 bytes
// (past the short path's end, and at every offset from a 16-byte lane).
func TestICRCMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	fill := func(b []byte) []byte {
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	for i := 0; i < 2000; i++ {
		var ip []byte
		if i%2 == 0 {
			ip = fill(make([]byte, 20+4*(i/2%11)))
			ip[0] = 0x40 | byte(len(ip)/4)
		} else {
			ip = fill(make([]byte, 40))
			ip[0] = 0x60 | ip[0]&0x0f
		}
		udp := fill(make([]byte, 8))
		pkt := fill(make([]byte, wire.BTHLen+i%1200+wire.ICRCLen)) // past the fold's threshold, every length mod its block
		got, ok := wire.ICRC(ip, udp, pkt)
		if !ok {
			t.Fatalf("ICRC refused a %d-byte IP header", len(ip))
		}
		if want := icrcReference(ip, udp, pkt); got != want {
			t.Fatalf("IP header %d bytes, packet %d: %08x, want %08x", len(ip), len(pkt), got, want)
		}
	}
}

// A packet sealed in pieces (head, a lent body, tail) carries the ICRC
// the same packet gets sealed whole, wherever the pieces split it.
func TestSealSplitMatchesSeal(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	flows := []wire.Flow{
		{Src: netip.MustParseAddrPort("10.0.0.1:4791"), Dst: netip.MustParseAddrPort("10.0.0.2:50000")},
		{Src: netip.MustParseAddrPort("[fd00::1]:4791"), Dst: netip.MustParseAddrPort("[fd00::2]:4791")},
	}
	for i := 0; i < 500; i++ {
		f := flows[i%2]
		whole := make([]byte, wire.BTHLen+rng.IntN(4200)+wire.ICRCLen)
		for k := range whole {
			whole[k] = byte(rng.Uint32())
		}
		if !f.Seal(whole) {
			t.Fatal("Seal refused the packet")
		}
		end := len(whole) - wire.ICRCLen
		h := wire.BTHLen + rng.IntN(end-wire.BTHLen+1)
		t2 := h + rng.IntN(end-h+1)
		head := append([]byte(nil), whole[:h]...)
		body := append([]byte(nil), whole[h:t2]...)
		tail := append([]byte(nil), whole[t2:end]...)
		tail = append(tail, 0, 0, 0, 0)
		s := wire.Sealer{Flow: f}
		if !s.SealSplit(head, body, tail) {
			t.Fatal("SealSplit refused the packet")
		}
		if got, want := tail[len(tail)-wire.ICRCLen:], whole[end:]; string(got) != string(want) {
			t.Fatalf("%d-byte packet split at %d and %d: ICRC %x, want %x", len(whole), h, t2, got, want)
		}
	}
	if (&wire.Sealer{Flow: flows[0]}).SealSplit(make([]byte, wire.BTHLen), nil, make([]byte, 3)) {
		t.Fatal("SealSplit accepted a tail too short for the ICRC")
	}
}

// A Sealer gives the ICRC a Flow gives, for packets of one size in a row
// and of two sizes in turn (its cached headers), and of changing sizes,
// IPv4 and IPv6, split or whole; Check accepts what it sealed and refuses
// a changed byte.
func TestSealerMatchesFlow(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, f := range []wire.Flow{
		{Src: netip.MustParseAddrPort("10.0.0.1:4791"), Dst: netip.MustParseAddrPort("10.0.0.2:50000")},
		{Src: netip.MustParseAddrPort("[fd00::1]:4791"), Dst: netip.MustParseAddrPort("[fd00::2]:4791")},
	} {
		s := wire.Sealer{Flow: f}
		for i := 0; i < 300; i++ {
			size := 64
			switch {
			case i%3 == 0:
				size = wire.BTHLen + rng.IntN(3000) + wire.ICRCLen
			case i%2 == 0 && i > 150:
				size = 20 // an ACK between full packets
			}
			want := make([]byte, size)
			for k := range want {
				want[k] = byte(rng.Uint32())
			}
			got := append([]byte(nil), want...)
			f.Seal(want)
			if !s.Seal(got) || string(got) != string(want) {
				t.Fatalf("%v, %d bytes: the Sealer's ICRC %x, the Flow's %x", f, size, got[size-4:], want[size-4:])
			}
			if !s.Check(got) {
				t.Fatalf("%v, %d bytes: Check refused what Seal sealed", f, size)
			}
			at := rng.IntN(size - 4)
			if at == 4 {
				at = 5 // byte 4, the BTH's resv8a, is outside the ICRC
			}
			got[at] ^= 1 << rng.IntN(8)
			if s.Check(got) {
				t.Fatalf("%v, %d bytes: Check accepted a changed byte", f, size)
			}
		}
	}
	if (&wire.Sealer{}).Seal(make([]byte, 8)) {
		t.Fatal("sealed a packet shorter than the BTH")
	}
}

// A packet sealed from its pieces, its payload copied in (SealCopy) or
// lent (SealSplit), carries the ICRC the whole packet gets, for heads a
// BTH long and a little longer (those the CRC joins with what follows
// them, up to its limit and past it), payloads of every length around
// that limit and of a full packet, and tails of a trailer and padding.
func TestSealFromPiecesMatchesSeal(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	s := wire.Sealer{Flow: wire.Flow{Src: netip.MustParseAddrPort("10.0.0.1:4791"), Dst: netip.MustParseAddrPort("10.0.0.2:4791")}}
	var payloads []int
	for n := 0; n <= 160; n++ {
		payloads = append(payloads, n)
	}
	payloads = append(payloads, 400, 511, 512, 513, 1024, 1344, 4096)
	for _, h := range []int{wire.BTHLen, wire.BTHLen + 4, 17, 28, 32} {
		for _, n := range payloads {
			for _, extra := range []int{0, 3, 11} { // a trailer and padding before the ICRC
				whole := make([]byte, h+n+extra+wire.ICRCLen)
				for k := range whole {
					whole[k] = byte(rng.Uint32())
				}
				require.True(t, s.Seal(whole))
				end := len(whole) - wire.ICRCLen
				head := append([]byte(nil), whole[:h]...)
				src := append([]byte(nil), whole[h:h+n]...)
				tail := append(append([]byte(nil), whole[h+n:end]...), 0, 0, 0, 0)
				dst := make([]byte, n)
				require.True(t, s.SealCopy(head, dst, src, tail))
				require.True(t, bytes.Equal(src, dst), "head %d, payload %d, %d more: the copy", h, n, extra)
				require.Equal(t, whole[end:], tail[len(tail)-wire.ICRCLen:], "head %d, payload %d, %d more: SealCopy's ICRC", h, n, extra)
				clear(tail[len(tail)-wire.ICRCLen:])
				require.True(t, s.SealSplit(head, src, tail))
				require.Equal(t, whole[end:], tail[len(tail)-wire.ICRCLen:], "head %d, payload %d, %d more: SealSplit's ICRC", h, n, extra)
				require.True(t, s.Check(whole))
			}
		}
	}
}

// BenchmarkSealCopy is a packet's payload copied in behind its headers
// and the packet sealed: a small SEND with immediate data (a 16-byte
// head, a 64-byte payload, a piggybacked ACK's 8 bytes after it) and a
// full middle packet at MTU 1500 (a BTH alone, 1,344 bytes).
func BenchmarkSealCopy(b *testing.B) {
	s := wire.Sealer{Flow: wire.Flow{Src: netip.MustParseAddrPort("10.0.0.1:4791"), Dst: netip.MustParseAddrPort("10.0.0.2:4791")}}
	for _, c := range []struct{ head, payload, tail int }{{16, 64, 8 + wire.ICRCLen}, {12, 1344, wire.ICRCLen}} {
		b.Run(fmt.Sprintf("%d+%d", c.head, c.payload), func(b *testing.B) {
			pkt, src := make([]byte, c.head+c.payload+c.tail), make([]byte, c.payload)
			b.SetBytes(int64(c.payload))
			for b.Loop() {
				s.SealCopy(pkt[:c.head], pkt[c.head:c.head+c.payload], src, pkt[c.head+c.payload:])
			}
		})
	}
}

// A Sealer told the flow's UDP checksum guards it (UDPChecksum) writes
// zeros where the ICRC goes, however the packet is built, and its checks
// take any ICRC while still copying the payload; the same Sealer without
// it seals and refuses as always (the control).
func TestSealerLeavesTheICRCToTheUDPChecksum(t *testing.T) {
	f := wire.Flow{Src: netip.MustParseAddrPort("10.0.0.1:4791"), Dst: netip.MustParseAddrPort("10.0.0.2:4791")}
	const h, n = wire.BTHLen, 100
	payload := bytes.Repeat([]byte{0xa5}, n)
	for _, skip := range []bool{false, true} {
		s := wire.Sealer{Flow: f, UDPChecksum: skip}
		whole := append(append(make([]byte, h), payload...), 0xff, 0xff, 0xff, 0xff)
		require.True(t, s.Seal(whole))
		tail := []byte{0xff, 0xff, 0xff, 0xff}
		require.True(t, s.SealSplit(whole[:h], payload, tail))
		dst := make([]byte, n)
		tail2 := []byte{0xff, 0xff, 0xff, 0xff}
		require.True(t, s.SealCopy(whole[:h], dst, payload, tail2))
		require.Equal(t, payload, dst, "SealCopy copies")
		icrc := whole[len(whole)-wire.ICRCLen:]
		if skip {
			require.Equal(t, []byte{0, 0, 0, 0}, icrc, "Seal")
			require.Equal(t, []byte{0, 0, 0, 0}, tail, "SealSplit")
			require.Equal(t, []byte{0, 0, 0, 0}, tail2, "SealCopy")
		} else {
			require.True(t, (&wire.Sealer{Flow: f}).Check(whole), "sealed for real")
			require.Equal(t, icrc, tail)
			require.Equal(t, icrc, tail2)
		}
		whole[len(whole)-1] ^= 0x40 // a wrong ICRC
		out := make([]byte, n)
		require.Equal(t, skip, s.Check(whole), "Check")
		_, ok := s.CheckUnknownID(whole)
		require.Equal(t, skip, ok, "CheckUnknownID")
		require.Equal(t, skip, s.CheckCopy(whole, h, out, false), "CheckCopy")
		require.Equal(t, payload, out, "CheckCopy copies either way")
		require.False(t, s.Check(whole[:wire.BTHLen+wire.ICRCLen-1]), "too short for a packet")
	}
}
