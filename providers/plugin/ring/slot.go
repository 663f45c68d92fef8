//go:build linux

package ring

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
)

// ErrCorrupt is wrapped by every error that comes of a ring the other
// process wrote wrongly: an index out of range, a slot that does not fit.
// A corrupt ring is not read again.
var ErrCorrupt = errors.New("ring: corrupt")

// Meta is what a slot says of its datagram besides the bytes.
type Meta struct {
	// Addr is the peer: the destination of a datagram to send, the source
	// of one received.
	Addr netip.AddrPort
	// Coalesce is vroce.Packet's hint that the receiver is vRoCE.
	Coalesce bool
}

// A slot is a header and the datagram, padded to slotAlign:
//
//	0  uint32 length of the datagram, or wrapMark
//	4  uint16 port
//	6  uint8  flags (flagCoalesce, flagIPv4)
//	7  uint8  zero
//	8  [16]byte address (IPv4 in its first four bytes)
//	24 datagram
//
// A slot never runs past the end of the area: a producer that finds too
// little room there writes wrapMark and goes on at the start.
const (
	slotHeader   = 24
	slotAlign    = 8
	wrapMark     = ^uint32(0)
	flagCoalesce = 1 << 0
	flagIPv4     = 1 << 1
)

// slotSize is the room a datagram of n bytes takes.
func slotSize(n int) uint64 { return uint64(slotHeader+n+slotAlign-1) &^ (slotAlign - 1) }

// putHeader writes a slot's header at the start of b.
func putHeader(b []byte, n int, m Meta) {
	binary.LittleEndian.PutUint32(b[0:], uint32(n))
	binary.LittleEndian.PutUint16(b[4:], m.Addr.Port())
	var flags byte
	if m.Coalesce {
		flags |= flagCoalesce
	}
	ip := m.Addr.Addr()
	if ip.Is4() {
		flags |= flagIPv4
		a := ip.As4()
		copy(b[8:24], a[:])
		clear(b[12:24])
	} else {
		a := ip.As16()
		copy(b[8:24], a[:])
	}
	b[6], b[7] = flags, 0
}

// decodeSlot reads the slot at offset off of area, with avail bytes
// published beyond off. It returns the datagram's place in area (start,
// length), its Meta, and how far the consumer's index moves; a wrap mark
// moves it to the start of the area and has n == -1. Nothing in area is
// trusted: everything is checked against area, avail and maxLen.
func decodeSlot(area []byte, off, avail uint64, maxLen int) (m Meta, start, n int, advance uint64, err error) {
	size := uint64(len(area))
	if off%slotAlign != 0 || off+slotAlign > size {
		return m, 0, 0, 0, fmt.Errorf("%w: slot at %d of a %d-byte area", ErrCorrupt, off, size)
	}
	if avail < slotAlign {
		return m, 0, 0, 0, fmt.Errorf("%w: %d bytes published at %d, less than a slot", ErrCorrupt, avail, off)
	}
	length := binary.LittleEndian.Uint32(area[off:])
	if length == wrapMark {
		advance = size - off
		if advance > avail {
			return m, 0, 0, 0, fmt.Errorf("%w: wrap at %d past the %d bytes published", ErrCorrupt, off, avail)
		}
		return m, 0, -1, advance, nil
	}
	if int64(length) > int64(maxLen) {
		return m, 0, 0, 0, fmt.Errorf("%w: a %d-byte datagram, larger than %d", ErrCorrupt, length, maxLen)
	}
	advance = slotSize(int(length))
	if advance > avail || off+advance > size {
		return m, 0, 0, 0, fmt.Errorf("%w: a %d-byte slot at %d does not fit (%d published, area %d)", ErrCorrupt, advance, off, avail, size)
	}
	h := area[off : off+slotHeader]
	flags := h[6]
	if flags&^(flagCoalesce|flagIPv4) != 0 || h[7] != 0 {
		return m, 0, 0, 0, fmt.Errorf("%w: slot flags %#x %#x", ErrCorrupt, flags, h[7])
	}
	var ip netip.Addr
	if flags&flagIPv4 != 0 {
		ip = netip.AddrFrom4([4]byte(h[8:12]))
	} else {
		ip = netip.AddrFrom16([16]byte(h[8:24]))
	}
	m = Meta{Addr: netip.AddrPortFrom(ip, binary.LittleEndian.Uint16(h[4:])), Coalesce: flags&flagCoalesce != 0}
	return m, int(off) + slotHeader, int(length), advance, nil
}
