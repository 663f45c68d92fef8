package afxdp

import (
	"encoding/binary"
	"math/bits"
	"net/netip"
)

// The frame codec: an AF_XDP socket moves whole Ethernet frames, so the
// provider writes and checks the Ethernet, IP and UDP headers the kernel
// writes and checks for the udp provider.

const (
	ethHeader  = 14
	ipv4Header = 20
	ipv6Header = 40
	udpHeader  = 8

	etherTypeIPv4 = 0x0800
	etherTypeIPv6 = 0x86dd
	protoUDP      = 17
	ttl           = 64
)

// FrameError says why a received frame was not a vRoCE datagram for this
// device. The provider counts and drops such frames; it never panics on them.
type FrameError string

func (e FrameError) Error() string { return "afxdp: frame dropped: " + string(e) }

const (
	errShort       = FrameError("shorter than its headers")
	errEtherType   = FrameError("neither IPv4 nor IPv6")
	errIPHeader    = FrameError("malformed IP header")
	errIPChecksum  = FrameError("bad IPv4 header checksum")
	errFragment    = FrameError("IP fragment")
	errNotUDP      = FrameError("not UDP")
	errUDPLength   = FrameError("UDP length disagrees with IP length")
	errUDPChecksum = FrameError("bad UDP checksum")
)

// headerLen is the room the Ethernet, IP and UDP headers take.
func headerLen(v6 bool) int {
	if v6 {
		return ethHeader + ipv6Header + udpHeader
	}
	return ethHeader + ipv4Header + udpHeader
}

// path is one direction of a flow: the MACs and addresses a frame carries.
type path struct {
	srcMAC, dstMAC [6]byte
	src, dst       netip.AddrPort
}

// writeHeaders fills frame[:headerLen] for a payload of n bytes already at
// frame[headerLen:]. The IPv4 ID is zero with DF set, as Linux sends from
// the udp provider's socket, so the receiver rebuilds the header the ICRC
// covers; the UDP checksum is always set, over IPv4 too.
func writeHeaders(frame []byte, l *path, n int) int {
	v6 := l.src.Addr().Is6()
	h := headerLen(v6)
	copy(frame[0:6], l.dstMAC[:])
	copy(frame[6:12], l.srcMAC[:])
	udpLen := udpHeader + n
	var pseudo uint64
	var udp []byte
	if v6 {
		binary.BigEndian.PutUint16(frame[12:], etherTypeIPv6)
		ip := frame[ethHeader : ethHeader+ipv6Header]
		binary.BigEndian.PutUint32(ip[0:], 6<<28)
		binary.BigEndian.PutUint16(ip[4:], uint16(udpLen))
		ip[6], ip[7] = protoUDP, ttl
		s, d := l.src.Addr().As16(), l.dst.Addr().As16()
		copy(ip[8:24], s[:])
		copy(ip[24:40], d[:])
		pseudo = sum(ip[8:40], 0) + uint64(udpLen) + protoUDP
		udp = frame[ethHeader+ipv6Header : h+n]
	} else {
		binary.BigEndian.PutUint16(frame[12:], etherTypeIPv4)
		ip := frame[ethHeader : ethHeader+ipv4Header]
		ip[0], ip[1] = 0x45, 0
		binary.BigEndian.PutUint16(ip[2:], uint16(ipv4Header+udpLen))
		binary.BigEndian.PutUint32(ip[4:], 0x4000) // ID 0, DF, offset 0
		ip[8], ip[9] = ttl, protoUDP
		ip[10], ip[11] = 0, 0
		s, d := l.src.Addr().As4(), l.dst.Addr().As4()
		copy(ip[12:16], s[:])
		copy(ip[16:20], d[:])
		binary.BigEndian.PutUint16(ip[10:], fold(sum(ip, 0)))
		pseudo = sum(ip[12:20], 0) + uint64(udpLen) + protoUDP
		udp = frame[ethHeader+ipv4Header : h+n]
	}
	binary.BigEndian.PutUint16(udp[0:], l.src.Port())
	binary.BigEndian.PutUint16(udp[2:], l.dst.Port())
	binary.BigEndian.PutUint16(udp[4:], uint16(udpLen))
	udp[6], udp[7] = 0, 0
	c := fold(sum(udp, pseudo))
	if c == 0 {
		c = 0xffff // zero means "no checksum"
	}
	binary.BigEndian.PutUint16(udp[6:], c)
	return h + n
}

// datagram is what parseFrame found in a frame.
type datagram struct {
	payload  []byte
	src, dst netip.AddrPort
}

// parseFrame checks a received Ethernet frame and finds its UDP payload.
// It accepts what writeHeaders writes and what a kernel sends: IPv4 not
// fragmented, with a valid header checksum; IPv6 with UDP as the next
// header; a UDP checksum that is valid or absent.
// Ethernet padding after the IP packet is ignored.
func parseFrame(frame []byte) (datagram, error) {
	var d datagram
	if len(frame) < ethHeader {
		return d, errShort
	}
	var udp []byte
	var pseudo uint64
	switch binary.BigEndian.Uint16(frame[12:]) {
	case etherTypeIPv4:
		ip := frame[ethHeader:]
		if len(ip) < ipv4Header {
			return d, errShort
		}
		ihl := int(ip[0]&0x0f) * 4
		total := int(binary.BigEndian.Uint16(ip[2:]))
		if ip[0]>>4 != 4 || ihl < ipv4Header || total < ihl || total > len(ip) {
			return d, errIPHeader
		}
		if fold(sum(ip[:ihl], 0)) != 0 {
			return d, errIPChecksum
		}
		if binary.BigEndian.Uint16(ip[6:])&0x3fff != 0 {
			return d, errFragment
		}
		if ip[9] != protoUDP {
			return d, errNotUDP
		}
		d.src = netip.AddrPortFrom(netip.AddrFrom4([4]byte(ip[12:16])), 0)
		d.dst = netip.AddrPortFrom(netip.AddrFrom4([4]byte(ip[16:20])), 0)
		udp = ip[ihl:total]
		pseudo = sum(ip[12:20], 0) + uint64(len(udp)) + protoUDP
	case etherTypeIPv6:
		ip := frame[ethHeader:]
		if len(ip) < ipv6Header {
			return d, errShort
		}
		plen := int(binary.BigEndian.Uint16(ip[4:]))
		if ip[0]>>4 != 6 || ipv6Header+plen > len(ip) {
			return d, errIPHeader
		}
		if ip[6] != protoUDP {
			return d, errNotUDP
		}
		d.src = netip.AddrPortFrom(netip.AddrFrom16([16]byte(ip[8:24])), 0)
		d.dst = netip.AddrPortFrom(netip.AddrFrom16([16]byte(ip[24:40])), 0)
		udp = ip[ipv6Header : ipv6Header+plen]
		pseudo = sum(ip[8:40], 0) + uint64(len(udp)) + protoUDP
	default:
		return d, errEtherType
	}
	if len(udp) < udpHeader {
		return d, errShort
	}
	if int(binary.BigEndian.Uint16(udp[4:])) != len(udp) {
		return d, errUDPLength
	}
	// Zero means "no checksum": legal for IPv4, and rdma_rxe sends it over
	// IPv6 too (RFC 6935 allows it for tunnels); the ICRC still covers the
	// payload, ports and length.
	if (udp[6] != 0 || udp[7] != 0) && fold(sum(udp, pseudo)) != 0 {
		return d, errUDPChecksum
	}
	d.src = netip.AddrPortFrom(d.src.Addr(), binary.BigEndian.Uint16(udp[0:]))
	d.dst = netip.AddrPortFrom(d.dst.Addr(), binary.BigEndian.Uint16(udp[2:]))
	d.payload = udp[udpHeader:]
	return d, nil
}

// sum adds b to acc as big-endian 16-bit words (RFC 1071), eight bytes at
// a time, and returns a partial sum below 2^33 that callers may add small
// values to; fold finishes the checksum.
func sum(b []byte, acc uint64) uint64 {
	var carry uint64
	for len(b) >= 8 {
		acc, carry = bits.Add64(acc, binary.BigEndian.Uint64(b), carry)
		b = b[8:]
	}
	var tail uint64
	if len(b) >= 4 {
		tail += uint64(binary.BigEndian.Uint32(b))
		b = b[4:]
	}
	if len(b) >= 2 {
		tail += uint64(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		tail += uint64(b[0]) << 8
	}
	acc, carry = bits.Add64(acc, tail, carry)
	acc, carry = bits.Add64(acc, carry, 0) // 2^64 is 1 in ones' complement
	acc += carry
	return acc>>32 + acc&0xffffffff
}

// fold reduces a sum to the 16-bit ones' complement checksum.
func fold(acc uint64) uint16 {
	acc = acc>>32 + acc&0xffffffff
	acc = acc>>32 + acc&0xffffffff
	acc = acc>>16 + acc&0xffff
	acc = acc>>16 + acc&0xffff
	acc = acc>>16 + acc&0xffff
	return ^uint16(acc)
}
