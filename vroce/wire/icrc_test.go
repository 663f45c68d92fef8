package wire_test

import (
	"hash/crc32"
	"math/rand/v2"
	"testing"

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
// steps by) and IPv6, and random payloads.
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
		pkt := fill(make([]byte, wire.BTHLen+rng.IntN(300)+wire.ICRCLen))
		got, ok := wire.ICRC(ip, udp, pkt)
		if !ok {
			t.Fatalf("ICRC refused a %d-byte IP header", len(ip))
		}
		if want := icrcReference(ip, udp, pkt); got != want {
			t.Fatalf("IP header %d bytes, packet %d: %08x, want %08x", len(ip), len(pkt), got, want)
		}
	}
}
