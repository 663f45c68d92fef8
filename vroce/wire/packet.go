package wire

import (
	"encoding/binary"
	"fmt"
)

// Packet is a decoded RoCEv2 packet. Only the headers its opcode carries are
// meaningful; Payload aliases the buffer it was parsed from.
type Packet struct {
	BTH       BTH
	RETH      RETH
	AETH      AETH
	DETH      DETH
	Atomic    AtomicETH
	AtomicAck uint64   // AtomicAckETH: the original remote value
	Imm       uint32   // ImmDt, as sent on the wire (big-endian)
	IETH      uint32   // the rkey to invalidate
	Piggy     PiggyACK // the trailer, when BTH.PiggyACK
	Payload   []byte   // without the trailer
}

// PiggyACK is a vRoCE extension: an acknowledgement for the other
// direction of the connection riding at the end of an RC request's
// payload, so that a reply need not be followed by an ACK datagram of
// its own (as TCP's ACKs ride on data). It holds what an RC_ACKNOWLEDGE
// would: the BTH PSN it acknowledges through, then its AETH.
//
//	PSN (24 bits, in a 32-bit word) | AETH (syndrome 8 bits, MSN 24 bits)
type PiggyACK struct {
	PSN  uint32
	AETH AETH
}

// PiggyACKLen is the trailer's length on the wire.
const PiggyACKLen = 8

// Put writes the trailer into b (at least PiggyACKLen bytes).
func (a *PiggyACK) Put(b []byte) {
	binary.BigEndian.PutUint32(b, a.PSN&psnMask)
	a.AETH.put(b[4:])
}

func (a *PiggyACK) get(b []byte) {
	a.PSN = binary.BigEndian.Uint32(b) & psnMask
	a.AETH.get(b[4:])
}

// CanCarryPiggyACK reports whether op may carry a PiggyACK trailer: RC
// SENDs and WRITEs, which have a payload to end.
func (op Opcode) CanCarryPiggyACK() bool {
	f := op.Flags()
	return op&transportMask == transportRC && f&IsRequest != 0 && f&HasPayload != 0
}

// ParseError says why bytes are not a RoCEv2 packet this codec accepts.
type ParseError struct {
	Reason string
	Opcode Opcode
	Len    int
}

func (e *ParseError) Error() string {
	return fmt.Sprintf("wire: bad packet (%d bytes, opcode %v): %s", e.Len, e.Opcode, e.Reason)
}

// PadCount is the number of pad bytes that follow n payload bytes.
func PadCount(n int) int { return -n & 3 }

// Len is the length of a whole packet of op with n payload bytes: headers,
// payload, pad and ICRC.
func Len(op Opcode, n int) int { return op.HeaderLen() + n + PadCount(n) + ICRCLen }

// Parse decodes b, a whole RoCEv2 packet from BTH to ICRC, into p. It checks
// structure only (lengths, opcode, version, pad); the caller checks the ICRC
// with CheckICRC, which needs the IP and UDP headers.
func Parse(p *Packet, b []byte) error {
	if len(b) < BTHLen+ICRCLen {
		return &ParseError{Reason: "shorter than BTH and ICRC", Len: len(b)}
	}
	p.BTH.get(b)
	op := p.BTH.Opcode
	if !op.Known() {
		return &ParseError{Reason: "unknown opcode", Opcode: op, Len: len(b)}
	}
	if p.BTH.TVer != 0 {
		return &ParseError{Reason: fmt.Sprintf("transport version %d", p.BTH.TVer), Opcode: op, Len: len(b)}
	}
	f := op.Flags()
	hdr := op.HeaderLen()
	payload := len(b) - hdr - ICRCLen - int(p.BTH.PadCnt)
	if payload < 0 {
		return &ParseError{Reason: "headers and pad longer than packet", Opcode: op, Len: len(b)}
	}
	if f&(HasPayload|MayExtend) == 0 && len(b) != hdr+ICRCLen {
		return &ParseError{Reason: "payload on an opcode that carries none", Opcode: op, Len: len(b)}
	}
	if f&(HasPayload|MayExtend) != 0 && (payload+int(p.BTH.PadCnt))&3 != 0 {
		return &ParseError{Reason: "payload and pad not a multiple of 4", Opcode: op, Len: len(b)}
	}
	off := BTHLen
	if f&HasDETH != 0 {
		p.DETH.get(b[off:])
		off += DETHLen
	}
	if f&HasRETH != 0 {
		p.RETH.get(b[off:])
		off += RETHLen
	}
	if f&HasAtomicETH != 0 {
		p.Atomic.get(b[off:])
		off += AtomicETHLen
	}
	if f&HasAETH != 0 {
		p.AETH.get(b[off:])
		off += AETHLen
	}
	if f&HasAtomicAckETH != 0 {
		p.AtomicAck = binary.BigEndian.Uint64(b[off:])
		off += AtomicAckETHLen
	}
	if f&HasImm != 0 {
		p.Imm = binary.BigEndian.Uint32(b[off:])
		off += ImmLen
	}
	if f&HasIETH != 0 {
		p.IETH = binary.BigEndian.Uint32(b[off:])
		off += IETHLen
	}
	if p.BTH.PiggyACK {
		if !op.CanCarryPiggyACK() {
			return &ParseError{Reason: "piggybacked ACK on an opcode that cannot carry one", Opcode: op, Len: len(b)}
		}
		if payload < PiggyACKLen {
			return &ParseError{Reason: "piggybacked ACK flagged but no room for it", Opcode: op, Len: len(b)}
		}
		payload -= PiggyACKLen
		p.Piggy.get(b[off+payload:])
	}
	p.Payload = b[off : off+payload]
	return nil
}

// EncodeHeaders writes BTH and the extension headers of p.BTH.Opcode into b
// for a packet that will carry payloadLen bytes, setting the pad count, and
// returns the header length. The caller writes the payload at b[n:] (and,
// with BTH.PiggyACK, the trailer after it), then calls Finish.
func (p *Packet) EncodeHeaders(b []byte, payloadLen int) (int, error) {
	op := p.BTH.Opcode
	if !op.Known() {
		return 0, &ParseError{Reason: "encode: unknown opcode", Opcode: op}
	}
	f := op.Flags()
	if f&(HasPayload|MayExtend) == 0 && payloadLen != 0 {
		return 0, &ParseError{Reason: "encode: payload on an opcode that carries none", Opcode: op, Len: payloadLen}
	}
	hdr := op.HeaderLen()
	trailer := 0
	if p.BTH.PiggyACK {
		if !op.CanCarryPiggyACK() {
			return 0, &ParseError{Reason: "encode: piggybacked ACK on an opcode that cannot carry one", Opcode: op}
		}
		trailer = PiggyACKLen // a multiple of 4: the pad stays the payload's
	}
	if len(b) < hdr+payloadLen+trailer+PadCount(payloadLen)+ICRCLen {
		return 0, &ParseError{Reason: "encode: buffer too small", Opcode: op, Len: len(b)}
	}
	p.BTH.PadCnt = uint8(PadCount(payloadLen))
	p.BTH.put(b)
	off := BTHLen
	if f&HasDETH != 0 {
		p.DETH.put(b[off:])
		off += DETHLen
	}
	if f&HasRETH != 0 {
		p.RETH.put(b[off:])
		off += RETHLen
	}
	if f&HasAtomicETH != 0 {
		p.Atomic.put(b[off:])
		off += AtomicETHLen
	}
	if f&HasAETH != 0 {
		p.AETH.put(b[off:])
		off += AETHLen
	}
	if f&HasAtomicAckETH != 0 {
		binary.BigEndian.PutUint64(b[off:], p.AtomicAck)
		off += AtomicAckETHLen
	}
	if f&HasImm != 0 {
		binary.BigEndian.PutUint32(b[off:], p.Imm)
		off += ImmLen
	}
	if f&HasIETH != 0 {
		binary.BigEndian.PutUint32(b[off:], p.IETH)
		off += IETHLen
	}
	return off, nil
}

// Finish zeroes the pad after n bytes of headers and payload and returns the
// packet length including the (not yet computed) ICRC.
func Finish(b []byte, n int) int {
	pad := PadCount(n)
	clear(b[n : n+pad])
	return n + pad + ICRCLen
}

// Encode writes the whole packet p, with p.Payload, into b and returns its
// length. The ICRC bytes are left for SealICRC.
func (p *Packet) Encode(b []byte) (int, error) {
	n, err := p.EncodeHeaders(b, len(p.Payload))
	if err != nil {
		return 0, err
	}
	n += copy(b[n:], p.Payload)
	if p.BTH.PiggyACK {
		p.Piggy.Put(b[n:])
		n += PiggyACKLen
	}
	return Finish(b, n), nil
}
