package wire

import (
	"encoding/binary"
	"hash/crc32"
	"net/netip"
)

// The ICRC is CRC-32 (IEEE) over a pseudo packet: eight 0xFF bytes standing
// for the InfiniBand LRH, then the IP header, UDP header and BTH with their
// variant fields set to all ones, then the rest of the packet up to the
// ICRC. It is sent little-endian. This is exactly rdma_rxe's rxe_icrc_hdr;
// the captures in shared/rxe-pcaps check it byte for byte.

const (
	pseudoLRHLen = 8
	ipv4HdrLen   = 20
	ipv6HdrLen   = 40
	udpHdrLen    = 8
	maxIPHdrLen  = 60
	ipv4DF       = 0x4000
	protoUDP     = 17
	defaultTTL   = 64
)

// ICRC computes the ICRC of pkt (BTH to ICRC inclusive, the last four bytes
// not read) as it travelled in the given IP and UDP headers.
func ICRC(ipHdr, udpHdr, pkt []byte) (uint32, bool) {
	if len(pkt) < BTHLen+ICRCLen {
		return 0, false
	}
	return icrc(ipHdr, udpHdr, pkt[:len(pkt)-ICRCLen], nil, nil)
}

// icrc computes the ICRC of the packet whose bytes before the ICRC are
// head, then body, then tail; head holds at least the BTH.
func icrc(ipHdr, udpHdr, head, body, tail []byte) (uint32, bool) {
	if len(head) < BTHLen {
		return 0, false
	}
	crc, ok := headersCRC(ipHdr, udpHdr)
	if !ok {
		return 0, false
	}
	return icrcFrom(crc, head, body, tail), true
}

// headersCRC is the CRC of the ICRC's pseudo packet up to the BTH: eight
// ones for the LRH, then the IP and UDP headers with their variant fields
// set to ones.
func headersCRC(ipHdr, udpHdr []byte) (uint32, bool) {
	if len(udpHdr) < udpHdrLen || len(ipHdr) == 0 || len(ipHdr) > maxIPHdrLen {
		return 0, false
	}
	var buf [pseudoLRHLen + maxIPHdrLen + udpHdrLen + BTHLen]byte
	n := copy(buf[:], allOnes[:pseudoLRHLen])
	ip := buf[n : n+len(ipHdr)]
	copy(ip, ipHdr)
	switch ipHdr[0] >> 4 {
	case 4:
		if len(ipHdr) < ipv4HdrLen {
			return 0, false
		}
		ip[1] = 0xff                // TOS
		ip[8] = 0xff                // TTL
		ip[10], ip[11] = 0xff, 0xff // header checksum
	case 6:
		if len(ipHdr) != ipv6HdrLen {
			return 0, false
		}
		ip[0] |= 0x0f                          // traffic class (high nibble)
		ip[1], ip[2], ip[3] = 0xff, 0xff, 0xff // traffic class, flow label
		ip[7] = 0xff                           // hop limit
	default:
		return 0, false
	}
	n += len(ipHdr)
	n += copy(buf[n:], udpHdr[:udpHdrLen])
	buf[n-2], buf[n-1] = 0xff, 0xff // UDP checksum
	return updatePrefix(0, &buf, n), true
}

// icrcFrom continues the CRC of the headers (headersCRC) over the BTH,
// resv8a set to ones, and the rest of the packet before its ICRC.
func icrcFrom(crc uint32, head, body, tail []byte) uint32 {
	switch {
	case shortPath(len(head)):
		crc = updateShort(crc, head, true) // resv8a masked on the way
	case haveShortCRC && len(head) <= 16:
		crc = updateLane(crc, head, true)
	case haveShortCRC:
		crc = updateLane(crc, head[:BTHLen], true)
		crc = updateIEEE(crc, head[BTHLen:])
	default:
		var bth [BTHLen]byte
		copy(bth[:], head[:BTHLen])
		bth[4] = 0xff // resv8a
		crc = updateSlicing8(crc, bth[:])
		crc = updateIEEE(crc, head[BTHLen:])
	}
	crc = updateIEEE(crc, body)
	return updateIEEE(crc, tail)
}

// updatePrefix runs the CRC over the masked headers here, with the short
// path or eight bytes a step (slicing-by-8), both of which keep the buffer
// on the stack: handing it to crc32.Update would move it to the heap on
// every packet, and a byte a step cost as much as the CRC of a 4 KiB
// payload.
func updatePrefix(crc uint32, b *[pseudoLRHLen + maxIPHdrLen + udpHdrLen + BTHLen]byte, n int) uint32 {
	if shortPath(n) {
		return updateShort(crc, b[:n], false)
	}
	return updateSlicing8(crc, b[:n])
}

// updateSlicing8 is crc32.Update(crc, crc32.IEEETable, p) for short p
// that must stay on the caller's stack.
func updateSlicing8(crc uint32, p []byte) uint32 {
	crc = ^crc
	t := &slicing8
	for len(p) >= 8 {
		crc ^= binary.LittleEndian.Uint32(p)
		crc = t[0][p[7]] ^ t[1][p[6]] ^ t[2][p[5]] ^ t[3][p[4]] ^
			t[4][crc>>24] ^ t[5][crc>>16&0xff] ^ t[6][crc>>8&0xff] ^ t[7][crc&0xff]
		p = p[8:]
	}
	for _, v := range p {
		crc = t[0][byte(crc)^v] ^ crc>>8
	}
	return ^crc
}

// slicing8[k][b] is the CRC of byte b followed by k zero bytes.
var slicing8 = func() (t [8][256]uint32) {
	t[0] = *crc32.IEEETable
	for i := range 256 {
		c := t[0][i]
		for k := 1; k < 8; k++ {
			c = t[0][c&0xff] ^ c>>8
			t[k][i] = c
		}
	}
	return t
}()

var allOnes = [8]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// Flow is the UDP/IP path a packet takes: what the ICRC covers of the
// headers a plain UDP socket neither shows nor lets us write.
//
// A UDP socket hides the IP header. Its variant fields (TOS, TTL, checksum,
// flow label) are masked out of the ICRC anyway; the invariant ones are
// rebuilt here: version, lengths, protocol and addresses from the datagram
// itself, and for IPv4 an ID of zero with DF set. That holds because the
// udp provider sends from an unconnected socket with IP_PMTUDISC_DO, for
// which Linux sends IP ID 0 (as rxe expects of a user-space sender), and a
// vRoCE receiver checks with ID 0 in full. A sender that numbers its IDs
// (rxe) is checked by CheckUnknownID, which solves for the one ID that
// fits (ipid.go). The UDP checksum, which we always set (rxe sends zero),
// covers the payload a second time.
type Flow struct {
	Src, Dst netip.AddrPort
}

// Headers writes the IP and UDP headers of a datagram of n bytes on f into
// b, as the udp provider's socket sends them (checksums left zero), and
// returns the two slices. ok is false when the addresses are not both IPv4
// or both IPv6. Captures of a provider that has no headers record these.
func (f Flow) Headers(b *[MaxHeaderSpace]byte, n int) (ip, udp []byte, ok bool) {
	src, dst := f.Src.Addr().Unmap(), f.Dst.Addr().Unmap()
	switch {
	case src.Is4() && dst.Is4():
		ip = b[:ipv4HdrLen]
		ip[0] = 0x45
		binary.BigEndian.PutUint16(ip[2:], uint16(ipv4HdrLen+udpHdrLen+n))
		binary.BigEndian.PutUint16(ip[6:], ipv4DF)
		ip[8] = defaultTTL // masked in the ICRC; what captures show
		ip[9] = protoUDP
		s, d := src.As4(), dst.As4()
		copy(ip[12:], s[:])
		copy(ip[16:], d[:])
	case src.Is6() && dst.Is6():
		ip = b[:ipv6HdrLen]
		ip[0] = 0x60
		binary.BigEndian.PutUint16(ip[4:], uint16(udpHdrLen+n))
		ip[6] = protoUDP
		ip[7] = defaultTTL
		s, d := src.As16(), dst.As16()
		copy(ip[8:], s[:])
		copy(ip[24:], d[:])
	default:
		return nil, nil, false
	}
	udp = b[len(ip) : len(ip)+udpHdrLen]
	binary.BigEndian.PutUint16(udp, f.Src.Port())
	binary.BigEndian.PutUint16(udp[2:], f.Dst.Port())
	binary.BigEndian.PutUint16(udp[4:], uint16(udpHdrLen+n))
	return ip, udp, true
}

// Seal writes pkt's ICRC into its last four bytes. It reports false when f
// mixes address families or pkt is too short.
func (f Flow) Seal(pkt []byte) bool {
	s := Sealer{Flow: f}
	return s.Seal(pkt)
}

// Sealer seals and checks the packets of one flow, keeping the CRC of the
// pseudo headers for the last two packet lengths it saw: a flow's packets
// come in a few sizes, mostly two at a time (full ones and ACKs, or full
// ones and a message's last), and the headers are most of a small
// packet's ICRC. Its methods are Flow's; one goroutine at a time uses it.
type Sealer struct {
	Flow Flow
	// UDPChecksum leaves the flow's integrity to its UDP checksum, as two
	// vRoCE ends whose providers verify it agreed (vroce.QPAttr
	// UDPChecksum): a packet goes with zeros where its ICRC would be, and
	// every check passes (its copy still happens). The ICRC stays as
	// RoCEv2 lays it out, so that decoders still read the packet.
	UDPChecksum bool
	lens        [2]int    // the packet lengths crcs are for, the latest first; 0 for none
	crcs        [2]uint32 // headersCRC for packets of those lengths
	// unshift, for those lengths, moves a CRC difference back over the
	// bytes after the IPv4 ID (CheckUnknownID); 0 until first needed.
	unshift [2]uint32
}

func (s *Sealer) headers(n int) (uint32, bool) {
	if n == s.lens[0] && n != 0 {
		return s.crcs[0], true
	}
	if n == s.lens[1] && n != 0 {
		s.lens[0], s.lens[1] = s.lens[1], s.lens[0]
		s.crcs[0], s.crcs[1] = s.crcs[1], s.crcs[0]
		s.unshift[0], s.unshift[1] = s.unshift[1], s.unshift[0]
		return s.crcs[0], true
	}
	var b [MaxHeaderSpace]byte
	ip, udp, ok := s.Flow.Headers(&b, n)
	if !ok {
		return 0, false
	}
	crc, ok := headersCRC(ip, udp)
	if ok {
		s.lens[1], s.crcs[1], s.unshift[1] = s.lens[0], s.crcs[0], s.unshift[0]
		s.lens[0], s.crcs[0], s.unshift[0] = n, crc, 0
	}
	return crc, ok
}

// Seal is Flow.Seal.
func (s *Sealer) Seal(pkt []byte) bool {
	return s.SealSplit(pkt[:max(len(pkt)-ICRCLen, 0)], nil, pkt[max(len(pkt)-ICRCLen, 0):])
}

// SealSplit seals a packet sent in three pieces, head then body then
// tail, where head holds at least the BTH and tail ends in the ICRC (a
// payload lent from registered memory travels as body, uncopied). It
// writes the ICRC into tail's last four bytes and reports false when the
// flow mixes address families or the pieces are too short.
func (s *Sealer) SealSplit(head, body, tail []byte) bool {
	if len(head) < BTHLen || len(tail) < ICRCLen {
		return false
	}
	if s.UDPChecksum {
		clear(tail[len(tail)-ICRCLen:])
		return true
	}
	crc, ok := s.headers(len(head) + len(body) + len(tail))
	if ok {
		crc = icrcFrom(crc, head, body, tail[:len(tail)-ICRCLen])
		binary.LittleEndian.PutUint32(tail[len(tail)-ICRCLen:], crc)
	}
	return ok
}

// SealCopy is SealSplit for a payload copied from src into dst as the
// ICRC reads it (copyUpdateIEEE): head, then dst, then tail are the
// packet, whether or not they lie in one buffer.
func (s *Sealer) SealCopy(head, dst, src, tail []byte) bool {
	if len(head) < BTHLen || len(tail) < ICRCLen || len(dst) < len(src) {
		return false
	}
	if s.UDPChecksum {
		copy(dst, src)
		clear(tail[len(tail)-ICRCLen:])
		return true
	}
	crc, ok := s.headers(len(head) + len(src) + len(tail))
	if ok {
		crc = icrcFrom(crc, head, nil, nil)
		crc = copyUpdateIEEE(crc, dst, src)
		crc = updateIEEE(crc, tail[:len(tail)-ICRCLen])
		binary.LittleEndian.PutUint32(tail[len(tail)-ICRCLen:], crc)
	}
	return ok
}

// Check is Flow.Check.
func (s *Sealer) Check(pkt []byte) bool {
	if len(pkt) < BTHLen+ICRCLen {
		return false
	}
	if s.UDPChecksum {
		return true
	}
	crc, ok := s.headers(len(pkt))
	return ok && binary.LittleEndian.Uint32(pkt[len(pkt)-ICRCLen:]) == icrcFrom(crc, pkt[:len(pkt)-ICRCLen], nil, nil)
}

// CheckCopy is Check, or with unknownID CheckUnknownID, for a packet
// whose payload, the len(dst) bytes at pkt[at:], is copied into dst as
// the ICRC reads it: one pass over the payload for both, where checking
// and then copying took two. dst is written whatever the verdict; a
// caller that places payloads this way must be able to ignore what a
// packet that fails put there. It is false, and dst untouched, when the
// payload does not lie between the headers and the ICRC.
func (s *Sealer) CheckCopy(pkt []byte, at int, dst []byte, unknownID bool) bool {
	if at < BTHLen || at+len(dst) > len(pkt)-ICRCLen {
		return false
	}
	if s.UDPChecksum {
		copy(dst, pkt[at:])
		return true
	}
	crc, ok := s.headers(len(pkt))
	if !ok {
		return false
	}
	crc = icrcFrom(crc, pkt[:at], nil, nil)
	crc = copyUpdateIEEE(crc, dst, pkt[at:at+len(dst)])
	want := updateIEEE(crc, pkt[at+len(dst):len(pkt)-ICRCLen])
	if unknownID {
		_, ok = s.matchUnknownID(pkt, want)
		return ok
	}
	return binary.LittleEndian.Uint32(pkt[len(pkt)-ICRCLen:]) == want
}

// Check reports whether pkt's ICRC is right for f.
func (f Flow) Check(pkt []byte) bool {
	s := Sealer{Flow: f}
	return s.Check(pkt)
}

// CheckICRC reports whether pkt's ICRC is right for the IP and UDP headers
// it arrived in (for providers that see whole frames, and for captures).
func CheckICRC(ipHdr, udpHdr, pkt []byte) bool {
	crc, ok := ICRC(ipHdr, udpHdr, pkt)
	return ok && binary.LittleEndian.Uint32(pkt[len(pkt)-ICRCLen:]) == crc
}

// MaxHeaderSpace is the size of the buffer Flow.UDPHeaders needs.
const MaxHeaderSpace = ipv6HdrLen + udpHdrLen
