package wire

import (
	"encoding/binary"
	"hash/crc32"
)

// The ICRC covers the IPv4 header's ID, which a plain UDP socket neither
// shows on receive nor lets us choose on send. vRoCE senders seal with ID
// 0 (what Linux sends on an unconnected DF socket) and vRoCE receivers
// check with ID 0: the full 32-bit check. Other RoCEv2 senders (rdma_rxe)
// number their IDs, so a receiver that cannot see the ID solves for it:
// the CRC is affine over GF(2), so the ICRC of the packet with ID x
// differs from its ICRC with ID 0 by a linear function of x alone, and at
// most one x explains the difference. A packet is accepted when one does;
// that leaves 16 of the 32 bits of the check, so a corrupted packet
// passes with probability 2^-16 instead of 2^-32 (the link's own CRC, the
// Ethernet FCS, still guards every hop).

// pseudoIDOffset is where the IPv4 ID sits in the ICRC's pseudo packet:
// behind the eight bytes standing for the LRH and four of the IP header.
const pseudoIDOffset = pseudoLRHLen + 4

// checkUnknownID reports whether some IPv4 ID makes got the ICRC of a
// packet whose ICRC with ID 0 is want, and which; unshift is idUnshift of
// the packet's length.
func checkUnknownID(got, want, unshift uint32) (uint16, bool) {
	if got == want {
		return 0, true
	}
	// got ^ want is the CRC register of the two ID bytes run from zero,
	// then moved over the bytes after them; move it back.
	return idForRegister(multModP(unshift, got^want))
}

// idUnshift is x^-8k mod P for a packet of n bytes (BTH to ICRC), where k
// is how many bytes of the ICRC's pseudo packet follow the IPv4 ID: the
// LRH, IPv4 and UDP headers, then the packet less its ICRC, from offset
// 14 on. About a microsecond: a Sealer keeps it per packet length.
func idUnshift(n int) uint32 {
	after := pseudoLRHLen + ipv4HdrLen + udpHdrLen + n - ICRCLen - (pseudoIDOffset + 2)
	return xPowInverse(8 * uint64(after))
}

// idForRegister finds the two bytes whose CRC from a zero register is reg.
// Every entry of the reflected CRC table differs in its top byte, so the
// top byte of reg names the table entry the second step used, and what is
// left names the first.
func idForRegister(reg uint32) (uint16, bool) {
	t := crc32.IEEETable
	j := tableByTop[reg>>24]
	first := reg ^ t[j] // the first step's entry, shifted right a byte
	if first>>24 != 0 {
		return 0, false
	}
	hi := tableByTop[first>>16&0xff]
	lo := byte(t[hi]) ^ j
	if raw2(hi, lo) != reg {
		return 0, false
	}
	return uint16(hi)<<8 | uint16(lo), true
}

// raw2 is the CRC register after bytes a then b, from zero, with no final
// inversion.
func raw2(a, b byte) uint32 {
	t := crc32.IEEETable
	r := t[a]
	return t[byte(r)^b] ^ r>>8
}

// tableByTop inverts the CRC table on its entries' top bytes.
var tableByTop = func() (inv [256]byte) {
	for i, v := range crc32.IEEETable {
		inv[v>>24] = byte(i)
	}
	return inv
}()

// Polynomials modulo the CRC-32 polynomial P, bit-reflected as the CRC
// register holds them: x^0 is the top bit.
const (
	reflectedPoly = 0xedb88320
	polyOne       = 1 << 31
	// xOrder is the multiplicative order of x modulo P: P is primitive,
	// so x^xOrder = 1 and x^-k = x^(xOrder-k) (TestXOrder checks it).
	xOrder = 1<<32 - 1
)

// multModP is a*b mod P.
func multModP(a, b uint32) uint32 {
	var p uint32
	for m := uint32(polyOne); m != 0 && a != 0; m >>= 1 {
		if a&m != 0 {
			p ^= b
			a ^= m
		}
		if b&1 != 0 {
			b = b>>1 ^ reflectedPoly
		} else {
			b >>= 1
		}
	}
	return p
}

// xPow2 holds x^(2^k) mod P.
var xPow2 = func() (t [32]uint32) {
	t[0] = polyOne >> 1 // x
	for k := 1; k < len(t); k++ {
		t[k] = multModP(t[k-1], t[k-1])
	}
	return t
}()

// xPow is x^e mod P.
func xPow(e uint64) uint32 {
	e %= xOrder
	p := uint32(polyOne)
	for k := 0; e != 0; k, e = k+1, e>>1 {
		if e&1 != 0 {
			p = multModP(p, xPow2[k])
		}
	}
	return p
}

// xPowInverse is x^-e mod P.
func xPowInverse(e uint64) uint32 { return xPow(xOrder - e%xOrder) }

// CheckUnknownID is Check for a packet whose IPv4 ID the receiver cannot
// see: it accepts the packet when some ID makes its ICRC right, and
// returns that ID (0 for a vRoCE sender). On IPv6, which has no ID, it is
// Check.
func (s *Sealer) CheckUnknownID(pkt []byte) (uint16, bool) {
	if len(pkt) < BTHLen+ICRCLen {
		return 0, false
	}
	if s.UDPChecksum {
		return 0, true
	}
	crc, ok := s.headers(len(pkt))
	if !ok {
		return 0, false
	}
	return s.matchUnknownID(pkt, icrcFrom(crc, pkt[:len(pkt)-ICRCLen], nil, nil))
}

// matchUnknownID is CheckUnknownID's verdict on pkt, whose ICRC with an
// IPv4 ID of 0 is want; s.headers has just been asked for len(pkt).
func (s *Sealer) matchUnknownID(pkt []byte, want uint32) (uint16, bool) {
	got := binary.LittleEndian.Uint32(pkt[len(pkt)-ICRCLen:])
	if got == want || !s.Flow.Dst.Addr().Unmap().Is4() {
		return 0, got == want
	}
	if s.unshift[0] == 0 { // headers made lens[0] this packet's length
		s.unshift[0] = idUnshift(len(pkt))
	}
	return checkUnknownID(got, want, s.unshift[0])
}

// CheckUnknownID is Sealer.CheckUnknownID for one packet.
func (f Flow) CheckUnknownID(pkt []byte) (uint16, bool) {
	s := Sealer{Flow: f}
	return s.CheckUnknownID(pkt)
}
