package wire

import "encoding/binary"

// SACK: the selective acknowledgement vRoCE peers negotiate. It rides as a
// trailer after the AETH of an RC_ACKNOWLEDGE, whose BTH PSN and AETH stay
// the ordinary cumulative ACK, so a RoCEv2 decoder (Wireshark, rxe) parses
// the packet as a plain ACK and ignores the rest:
//
//	magic 0x5341 ("SA") | version 1 | block count | blocks...
//	block: first PSN (24 bits, in a 32-bit word) | packet count (32 bits)
//
// Each block names PSNs beyond the cumulative ACK that the responder holds,
// but for a first block at or below the cumulative PSN: a D-SACK, as in
// TCP (RFC 2883), naming a request that arrived twice, so the requester
// learns that its resend repaired nothing.

const (
	sackMagic       = 0x5341
	sackVersion     = 1
	sackHeaderLen   = 4
	sackBlockLen    = 8
	MaxSACKBlocks   = 8
	MaxSACKTrailer  = sackHeaderLen + MaxSACKBlocks*sackBlockLen
	maxSACKBlockLen = 1 << 16
)

// SACKBlock is a run of PSNs the responder holds out of order.
type SACKBlock struct {
	First uint32
	Count uint32
}

// SACK is a decoded trailer.
type SACK struct {
	Blocks [MaxSACKBlocks]SACKBlock
	N      int
}

// AppendBlock adds a run, reporting false when the trailer is full.
func (s *SACK) AppendBlock(first, count uint32) bool {
	if s.N == MaxSACKBlocks {
		return false
	}
	s.Blocks[s.N] = SACKBlock{First: first & psnMask, Count: count}
	s.N++
	return true
}

// Len is the trailer's length on the wire.
func (s *SACK) Len() int { return sackHeaderLen + s.N*sackBlockLen }

// Encode writes the trailer into b (at least Len bytes).
func (s *SACK) Encode(b []byte) int {
	binary.BigEndian.PutUint16(b, sackMagic)
	b[2], b[3] = sackVersion, byte(s.N)
	off := sackHeaderLen
	for _, blk := range s.Blocks[:s.N] {
		binary.BigEndian.PutUint32(b[off:], blk.First&psnMask)
		binary.BigEndian.PutUint32(b[off+4:], blk.Count)
		off += sackBlockLen
	}
	return off
}

// ParseSACK decodes the trailer of an ACK's payload. It reports false for
// anything that is not a well-formed trailer (an empty payload included);
// the ACK itself is valid either way.
func ParseSACK(s *SACK, b []byte) bool {
	if len(b) < sackHeaderLen || binary.BigEndian.Uint16(b) != sackMagic || b[2] != sackVersion {
		return false
	}
	n := int(b[3])
	if n > MaxSACKBlocks || len(b) < sackHeaderLen+n*sackBlockLen {
		return false
	}
	off := sackHeaderLen
	for i := 0; i < n; i++ {
		first := binary.BigEndian.Uint32(b[off:])
		count := binary.BigEndian.Uint32(b[off+4:])
		if first > psnMask || count == 0 || count > maxSACKBlockLen {
			return false
		}
		s.Blocks[i] = SACKBlock{First: first, Count: count}
		off += sackBlockLen
	}
	s.N = n
	return true
}
