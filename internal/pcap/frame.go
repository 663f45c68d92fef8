package pcap

import (
	"encoding/binary"
)

const (
	ethHdrLen     = 14
	etherTypeIPv4 = 0x0800
	etherTypeIPv6 = 0x86dd
	etherTypeVLAN = 0x8100
	protoUDP      = 17
	udpHdrLen     = 8
)

// UDPDatagram is a UDP datagram found in an Ethernet frame, with the raw IP
// and UDP headers it came in (what the RoCEv2 ICRC covers).
type UDPDatagram struct {
	IPHeader  []byte
	UDPHeader []byte
	SrcPort   uint16
	DstPort   uint16
	Payload   []byte
}

// DecodeUDP finds the UDP datagram in an Ethernet II frame (one optional
// VLAN tag, IPv4 without fragmentation or IPv6 without extension headers).
// It reports false for anything else.
func DecodeUDP(frame []byte) (UDPDatagram, bool) {
	var d UDPDatagram
	if len(frame) < ethHdrLen {
		return d, false
	}
	et := binary.BigEndian.Uint16(frame[12:])
	off := ethHdrLen
	if et == etherTypeVLAN {
		if len(frame) < ethHdrLen+4 {
			return d, false
		}
		et = binary.BigEndian.Uint16(frame[16:])
		off += 4
	}
	ip := frame[off:]
	var l4 []byte
	switch et {
	case etherTypeIPv4:
		if len(ip) < 20 || ip[0]>>4 != 4 {
			return d, false
		}
		ihl := int(ip[0]&0xf) * 4
		total := int(binary.BigEndian.Uint16(ip[2:]))
		if ihl < 20 || total < ihl || total > len(ip) || ip[9] != protoUDP {
			return d, false
		}
		if binary.BigEndian.Uint16(ip[6:])&0x3fff != 0 { // fragment
			return d, false
		}
		d.IPHeader, l4 = ip[:ihl], ip[ihl:total]
	case etherTypeIPv6:
		if len(ip) < 40 || ip[0]>>4 != 6 || ip[6] != protoUDP {
			return d, false
		}
		plen := int(binary.BigEndian.Uint16(ip[4:]))
		if 40+plen > len(ip) {
			return d, false
		}
		d.IPHeader, l4 = ip[:40], ip[40:40+plen]
	default:
		return d, false
	}
	if len(l4) < udpHdrLen {
		return d, false
	}
	ulen := int(binary.BigEndian.Uint16(l4[4:]))
	if ulen < udpHdrLen || ulen > len(l4) {
		return d, false
	}
	d.UDPHeader = l4[:udpHdrLen]
	d.SrcPort = binary.BigEndian.Uint16(l4)
	d.DstPort = binary.BigEndian.Uint16(l4[2:])
	d.Payload = l4[udpHdrLen:ulen]
	return d, true
}

// EthernetHeader builds a synthetic Ethernet II header for an IP header
// (IPv4 or IPv6 by its version nibble), with locally administered MAC
// addresses; captures of providers that have no link layer use it.
func EthernetHeader(b *[ethHdrLen]byte, ipHdr []byte) []byte {
	*b = [ethHdrLen]byte{0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01}
	et := uint16(etherTypeIPv4)
	if len(ipHdr) > 0 && ipHdr[0]>>4 == 6 {
		et = etherTypeIPv6
	}
	binary.BigEndian.PutUint16(b[12:], et)
	return b[:]
}

// FillChecksums sets the IPv4 header checksum (IPv6 has none) and the UDP
// checksum of a datagram whose headers were built without them.
func FillChecksums(ipHdr, udpHdr, payload []byte) {
	var pseudo uint32
	if ipHdr[0]>>4 == 4 {
		ipHdr[10], ipHdr[11] = 0, 0
		binary.BigEndian.PutUint16(ipHdr[10:], ^fold(sum(0, ipHdr)))
		pseudo = sum(0, ipHdr[12:20])
	} else {
		pseudo = sum(0, ipHdr[8:40])
	}
	pseudo += protoUDP + uint32(len(udpHdr)+len(payload))
	udpHdr[6], udpHdr[7] = 0, 0
	c := ^fold(sum(sum(pseudo, udpHdr), payload))
	if c == 0 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(udpHdr[6:], c)
}

func sum(acc uint32, b []byte) uint32 {
	for len(b) >= 2 {
		acc += uint32(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		acc += uint32(b[0]) << 8
	}
	return acc
}

func fold(acc uint32) uint16 {
	for acc > 0xffff {
		acc = acc&0xffff + acc>>16
	}
	return uint16(acc)
}
