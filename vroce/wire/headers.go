package wire

import "encoding/binary"

// Header lengths in bytes.
const (
	BTHLen          = 12
	RETHLen         = 16
	AETHLen         = 4
	DETHLen         = 8
	ImmLen          = 4
	IETHLen         = 4
	AtomicETHLen    = 28
	AtomicAckETHLen = 8
	ICRCLen         = 4

	// DefaultPKey is the full-membership default partition key; RoCEv2
	// devices (rxe among them) accept nothing else in practice.
	DefaultPKey = 0xffff
	// UDPPort is the IANA port for RoCEv2.
	UDPPort = 4791

	psnMask = 0xffffff
	qpnMask = 0xffffff
)

// BTH is the base transport header.
type BTH struct {
	Opcode Opcode
	SE     bool // solicited event
	MigReq bool
	PadCnt uint8 // payload pad bytes, 0-3
	TVer   uint8 // transport header version, 0
	PKey   uint16
	DestQP uint32 // 24 bits
	AckReq bool
	PSN    uint32 // 24 bits
	// PiggyACK (vRoCE, negotiated): the packet, an RC request with
	// payload, ends with a PiggyACK trailer. It is bit 0 of the reserved
	// bits after AckReq, which the ICRC covers; plain RoCEv2 decoders
	// read the trailer as payload.
	PiggyACK bool
}

func (h *BTH) put(b []byte) {
	b[0] = byte(h.Opcode)
	f := h.PadCnt&3<<4 | h.TVer&0xf
	if h.SE {
		f |= 0x80
	}
	if h.MigReq {
		f |= 0x40
	}
	b[1] = f
	binary.BigEndian.PutUint16(b[2:], h.PKey)
	binary.BigEndian.PutUint32(b[4:], h.DestQP&qpnMask) // resv8a is byte 4: zero
	binary.BigEndian.PutUint32(b[8:], h.PSN&psnMask)
	if h.AckReq {
		b[8] |= 0x80
	}
	if h.PiggyACK {
		b[8] |= piggyACKBit
	}
}

const piggyACKBit = 0x01

func (h *BTH) get(b []byte) {
	h.Opcode = Opcode(b[0])
	h.SE = b[1]&0x80 != 0
	h.MigReq = b[1]&0x40 != 0
	h.PadCnt = b[1] >> 4 & 3
	h.TVer = b[1] & 0xf
	h.PKey = binary.BigEndian.Uint16(b[2:])
	h.DestQP = binary.BigEndian.Uint32(b[4:]) & qpnMask
	h.AckReq = b[8]&0x80 != 0
	h.PiggyACK = b[8]&piggyACKBit != 0
	h.PSN = binary.BigEndian.Uint32(b[8:]) & psnMask
}

// RETH is the RDMA extended transport header of WRITE and READ requests.
type RETH struct {
	VA     uint64
	RKey   uint32
	DMALen uint32 // length of the whole message
}

func (h *RETH) put(b []byte) {
	binary.BigEndian.PutUint64(b, h.VA)
	binary.BigEndian.PutUint32(b[8:], h.RKey)
	binary.BigEndian.PutUint32(b[12:], h.DMALen)
}

func (h *RETH) get(b []byte) {
	h.VA = binary.BigEndian.Uint64(b)
	h.RKey = binary.BigEndian.Uint32(b[8:])
	h.DMALen = binary.BigEndian.Uint32(b[12:])
}

// AETH is the ACK extended transport header: a syndrome and the MSN.
type AETH struct {
	Syndrome Syndrome
	MSN      uint32 // 24 bits
}

func (h *AETH) put(b []byte) {
	binary.BigEndian.PutUint32(b, uint32(h.Syndrome)<<24|h.MSN&0xffffff)
}

func (h *AETH) get(b []byte) {
	v := binary.BigEndian.Uint32(b)
	h.Syndrome = Syndrome(v >> 24)
	h.MSN = v & 0xffffff
}

// Syndrome is the AETH syndrome: a kind in the top three bits and a value
// (credit count, RNR timer or NAK code) in the low five.
type Syndrome uint8

// Syndrome kinds.
const (
	SyndromeACK    Syndrome = 0x00
	SyndromeRNRNAK Syndrome = 0x20
	SyndromeNAK    Syndrome = 0x60
	syndromeKind   Syndrome = 0xe0
)

// NAK codes (the low five bits of a NAK syndrome).
const (
	NAKPSNSequenceError   = 0
	NAKInvalidRequest     = 1
	NAKRemoteAccessError  = 2
	NAKRemoteOperational  = 3
	NAKInvalidRDRequest   = 4
	CreditCountInvalid    = 0x1f // ACK with no end-to-end credit information
	AckSyndromeNoCredits  = SyndromeACK | CreditCountInvalid
	maxRNRTimerCode       = 0x1f
	syndromeValueBitsMask = 0x1f
)

// Kind returns the syndrome's kind: SyndromeACK, SyndromeRNRNAK or SyndromeNAK
// (anything else is reserved).
func (s Syndrome) Kind() Syndrome { return s & syndromeKind }

// Value returns the low five bits: credits, RNR timer code or NAK code.
func (s Syndrome) Value() uint8 { return uint8(s & syndromeValueBitsMask) }

// NAK builds a NAK syndrome with the given code.
func NAK(code uint8) Syndrome { return SyndromeNAK | Syndrome(code&syndromeValueBitsMask) }

// RNRNAK builds an RNR NAK syndrome with the given timer code.
func RNRNAK(timer uint8) Syndrome { return SyndromeRNRNAK | Syndrome(timer&maxRNRTimerCode) }

// DETH is the datagram extended transport header of UD packets.
type DETH struct {
	QKey  uint32
	SrcQP uint32 // 24 bits
}

func (h *DETH) put(b []byte) {
	binary.BigEndian.PutUint32(b, h.QKey)
	binary.BigEndian.PutUint32(b[4:], h.SrcQP&qpnMask)
}

func (h *DETH) get(b []byte) {
	h.QKey = binary.BigEndian.Uint32(b)
	h.SrcQP = binary.BigEndian.Uint32(b[4:]) & qpnMask
}

// AtomicETH is the header of COMPARE_SWAP and FETCH_ADD requests.
type AtomicETH struct {
	VA      uint64
	RKey    uint32
	SwapAdd uint64 // swap value, or the value to add
	Compare uint64
}

func (h *AtomicETH) put(b []byte) {
	binary.BigEndian.PutUint64(b, h.VA)
	binary.BigEndian.PutUint32(b[8:], h.RKey)
	binary.BigEndian.PutUint64(b[12:], h.SwapAdd)
	binary.BigEndian.PutUint64(b[20:], h.Compare)
}

func (h *AtomicETH) get(b []byte) {
	h.VA = binary.BigEndian.Uint64(b)
	h.RKey = binary.BigEndian.Uint32(b[8:])
	h.SwapAdd = binary.BigEndian.Uint64(b[12:])
	h.Compare = binary.BigEndian.Uint64(b[20:])
}
