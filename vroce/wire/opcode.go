package wire

import "fmt"

// Opcode is the BTH opcode: the transport type in the top three bits and the
// operation in the low five.
type Opcode uint8

// RC opcodes (IBA 9.2.1, table 38).
const (
	RCSendFirst           Opcode = 0x00
	RCSendMiddle          Opcode = 0x01
	RCSendLast            Opcode = 0x02
	RCSendLastImm         Opcode = 0x03
	RCSendOnly            Opcode = 0x04
	RCSendOnlyImm         Opcode = 0x05
	RCWriteFirst          Opcode = 0x06
	RCWriteMiddle         Opcode = 0x07
	RCWriteLast           Opcode = 0x08
	RCWriteLastImm        Opcode = 0x09
	RCWriteOnly           Opcode = 0x0a
	RCWriteOnlyImm        Opcode = 0x0b
	RCReadRequest         Opcode = 0x0c
	RCReadResponseFirst   Opcode = 0x0d
	RCReadResponseMiddle  Opcode = 0x0e
	RCReadResponseLast    Opcode = 0x0f
	RCReadResponseOnly    Opcode = 0x10
	RCAcknowledge         Opcode = 0x11
	RCAtomicAcknowledge   Opcode = 0x12
	RCCompareSwap         Opcode = 0x13
	RCFetchAdd            Opcode = 0x14
	RCSendLastInvalidate  Opcode = 0x16
	RCSendOnlyInvalidate  Opcode = 0x17
	UCSendFirst           Opcode = 0x20
	UCSendMiddle          Opcode = 0x21
	UCSendLast            Opcode = 0x22
	UCSendLastImm         Opcode = 0x23
	UCSendOnly            Opcode = 0x24
	UCSendOnlyImm         Opcode = 0x25
	UCWriteFirst          Opcode = 0x26
	UCWriteMiddle         Opcode = 0x27
	UCWriteLast           Opcode = 0x28
	UCWriteLastImm        Opcode = 0x29
	UCWriteOnly           Opcode = 0x2a
	UCWriteOnlyImm        Opcode = 0x2b
	UDSendOnly            Opcode = 0x64
	UDSendOnlyImm         Opcode = 0x65
	opcodeTableSize              = 0x100
	transportMask         Opcode = 0xe0
	transportRC           Opcode = 0x00
	transportUC           Opcode = 0x20
	transportUD           Opcode = 0x60
	firstReservedRCOpcode        = 0x18
)

// Flags describe what an opcode carries and means; they mirror rdma_rxe's
// opcode mask so that a reader of rxe_opcode.c finds the same facts here.
type Flags uint32

const (
	HasRETH Flags = 1 << iota
	HasAETH
	HasDETH
	HasImm
	HasIETH
	HasAtomicETH
	HasAtomicAckETH
	HasPayload
	IsRequest  // sent by a requester
	IsResponse // sent by a responder (ACK, read response, atomic ACK)
	IsSend
	IsWrite
	IsRead
	IsAtomic
	IsFirst // starts a message
	IsLast  // ends a message
	// ConsumesRecv marks requests that complete a receive WQE at the
	// responder (the last packet of a SEND, or WRITE with immediate).
	ConsumesRecv
	// MayExtend marks the ACK, which may carry a vRoCE extension trailer
	// (SACK blocks) after its AETH; plain RoCEv2 decoders ignore it.
	MayExtend
	known
)

var opcodeInfo = [opcodeTableSize]struct {
	name  string
	flags Flags
}{}

func defineOpcode(op Opcode, name string, f Flags) {
	opcodeInfo[op].name = name
	opcodeInfo[op].flags = f | known
}

func init() {
	const (
		req   = IsRequest
		first = IsFirst
		last  = IsLast
		only  = IsFirst | IsLast
		pay   = HasPayload
	)
	for _, t := range []struct {
		base   Opcode
		prefix string
	}{{transportRC, "RC"}, {transportUC, "UC"}} {
		b := t.base
		p := t.prefix + "_"
		send := req | IsSend | pay
		write := req | IsWrite | pay
		defineOpcode(b, p+"SEND_FIRST", send|first)
		defineOpcode(b|0x01, p+"SEND_MIDDLE", send)
		defineOpcode(b|0x02, p+"SEND_LAST", send|last|ConsumesRecv)
		defineOpcode(b|0x03, p+"SEND_LAST_WITH_IMMEDIATE", send|last|ConsumesRecv|HasImm)
		defineOpcode(b|0x04, p+"SEND_ONLY", send|only|ConsumesRecv)
		defineOpcode(b|0x05, p+"SEND_ONLY_WITH_IMMEDIATE", send|only|ConsumesRecv|HasImm)
		defineOpcode(b|0x06, p+"RDMA_WRITE_FIRST", write|first|HasRETH)
		defineOpcode(b|0x07, p+"RDMA_WRITE_MIDDLE", write)
		defineOpcode(b|0x08, p+"RDMA_WRITE_LAST", write|last)
		defineOpcode(b|0x09, p+"RDMA_WRITE_LAST_WITH_IMMEDIATE", write|last|ConsumesRecv|HasImm)
		defineOpcode(b|0x0a, p+"RDMA_WRITE_ONLY", write|only|HasRETH)
		defineOpcode(b|0x0b, p+"RDMA_WRITE_ONLY_WITH_IMMEDIATE", write|only|ConsumesRecv|HasRETH|HasImm)
	}
	resp := IsResponse
	defineOpcode(RCReadRequest, "RC_RDMA_READ_REQUEST", req|IsRead|only|HasRETH)
	defineOpcode(RCReadResponseFirst, "RC_RDMA_READ_RESPONSE_FIRST", resp|IsRead|pay|first|HasAETH)
	defineOpcode(RCReadResponseMiddle, "RC_RDMA_READ_RESPONSE_MIDDLE", resp|IsRead|pay)
	defineOpcode(RCReadResponseLast, "RC_RDMA_READ_RESPONSE_LAST", resp|IsRead|pay|last|HasAETH)
	defineOpcode(RCReadResponseOnly, "RC_RDMA_READ_RESPONSE_ONLY", resp|IsRead|pay|only|HasAETH)
	defineOpcode(RCAcknowledge, "RC_ACKNOWLEDGE", resp|only|HasAETH|MayExtend)
	defineOpcode(RCAtomicAcknowledge, "RC_ATOMIC_ACKNOWLEDGE", resp|IsAtomic|only|HasAETH|HasAtomicAckETH)
	defineOpcode(RCCompareSwap, "RC_COMPARE_SWAP", req|IsAtomic|only|HasAtomicETH)
	defineOpcode(RCFetchAdd, "RC_FETCH_ADD", req|IsAtomic|only|HasAtomicETH)
	defineOpcode(RCSendLastInvalidate, "RC_SEND_LAST_WITH_INVALIDATE", req|IsSend|pay|last|ConsumesRecv|HasIETH)
	defineOpcode(RCSendOnlyInvalidate, "RC_SEND_ONLY_WITH_INVALIDATE", req|IsSend|pay|only|ConsumesRecv|HasIETH)
	defineOpcode(UDSendOnly, "UD_SEND_ONLY", req|IsSend|pay|only|ConsumesRecv|HasDETH)
	defineOpcode(UDSendOnlyImm, "UD_SEND_ONLY_WITH_IMMEDIATE", req|IsSend|pay|only|ConsumesRecv|HasDETH|HasImm)
}

// Known reports whether op is an opcode this codec decodes.
func (op Opcode) Known() bool { return opcodeInfo[op].flags&known != 0 }

// Flags returns what op carries; zero for an unknown opcode.
func (op Opcode) Flags() Flags { return opcodeInfo[op].flags }

// IsRC, IsUC and IsUD report op's transport.
func (op Opcode) IsRC() bool { return op&transportMask == transportRC }
func (op Opcode) IsUC() bool { return op&transportMask == transportUC }
func (op Opcode) IsUD() bool { return op&transportMask == transportUD }

func (op Opcode) String() string {
	if n := opcodeInfo[op].name; n != "" {
		return n
	}
	return fmt.Sprintf("OPCODE_%#02x", uint8(op))
}

// HeaderLen is the length of BTH plus the extension headers op carries.
func (op Opcode) HeaderLen() int {
	f := op.Flags()
	n := BTHLen
	if f&HasDETH != 0 {
		n += DETHLen
	}
	if f&HasRETH != 0 {
		n += RETHLen
	}
	if f&HasAtomicETH != 0 {
		n += AtomicETHLen
	}
	if f&HasAETH != 0 {
		n += AETHLen
	}
	if f&HasAtomicAckETH != 0 {
		n += AtomicAckETHLen
	}
	if f&HasImm != 0 {
		n += ImmLen
	}
	if f&HasIETH != 0 {
		n += IETHLen
	}
	return n
}
