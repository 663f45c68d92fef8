package vroce

import (
	"fmt"
	"net/netip"

	"vroce.dev/vroce/wire"
)

// WROpcode is the operation of a send work request (ibv_wr_opcode).
type WROpcode uint8

// Send work request opcodes.
const (
	WRSend WROpcode = iota
	WRSendWithImm
	WRRDMAWrite
	WRRDMAWriteWithImm
	WRRDMARead
	WRAtomicCmpAndSwp
	WRAtomicFetchAndAdd
)

var wrOpcodeNames = [...]string{"SEND", "SEND_WITH_IMM", "RDMA_WRITE", "RDMA_WRITE_WITH_IMM", "RDMA_READ", "ATOMIC_CMP_AND_SWP", "ATOMIC_FETCH_AND_ADD"}

func (o WROpcode) String() string {
	if int(o) < len(wrOpcodeNames) {
		return wrOpcodeNames[o]
	}
	return fmt.Sprintf("WROpcode(%d)", uint8(o))
}

func (o WROpcode) isAtomic() bool { return o == WRAtomicCmpAndSwp || o == WRAtomicFetchAndAdd }
func (o WROpcode) isWrite() bool  { return o == WRRDMAWrite || o == WRRDMAWriteWithImm }
func (o WROpcode) isSend() bool   { return o == WRSend || o == WRSendWithImm }
func (o WROpcode) hasImm() bool   { return o == WRSendWithImm || o == WRRDMAWriteWithImm }

// awaitsResponse: a READ or an atomic, whose data comes back in responses
// (and which max_rd_atomic bounds).
func (o WROpcode) awaitsResponse() bool { return o == WRRDMARead || o.isAtomic() }

// SendFlags modify a send work request (ibv_send_flags).
type SendFlags uint8

// Send flags.
const (
	// SendSignaled asks for a completion on success (errors always
	// complete).
	SendSignaled SendFlags = 1 << iota
	// SendInline copies the data at post time; the buffers need no MR and
	// may be reused when PostSend returns.
	SendInline
	// SendFence waits for earlier RDMA READs and atomics to complete.
	SendFence
	// SendSolicited sets the solicited-event bit.
	SendSolicited
)

// SGE is a scatter/gather element: Length bytes at Addr in the memory
// region with local key LKey (ibv_sge). MR.SGE builds one.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// SendWR is a send work request (ibv_send_wr).
type SendWR struct {
	ID     uint64
	Opcode WROpcode
	Flags  SendFlags
	SGL    []SGE
	// Inline is the data of a SendInline request (instead of SGL).
	Inline []byte
	// Imm is the immediate data of *_WITH_IMM, in host order.
	Imm uint32
	// RemoteAddr and RKey name the target of RDMA and atomic operations.
	RemoteAddr uint64
	RKey       uint32
	// CompareAdd is the value to compare (CMP_AND_SWP) or to add
	// (FETCH_AND_ADD); Swap is the value swapped in.
	CompareAdd uint64
	Swap       uint64
	// AH, RemoteQPN and RemoteQKey address a UD send.
	AH         *AH
	RemoteQPN  uint32
	RemoteQKey uint32
}

// RecvWR is a receive work request (ibv_recv_wr).
type RecvWR struct {
	ID  uint64
	SGL []SGE
}

// WCStatus is a completion's status (ibv_wc_status).
type WCStatus uint8

// Completion statuses.
const (
	WCSuccess WCStatus = iota
	WCLocLenErr
	WCLocQPOpErr
	WCLocProtErr
	WCWRFlushErr
	WCBadRespErr
	WCLocAccessErr
	WCRemInvReqErr
	WCRemAccessErr
	WCRemOpErr
	WCRetryExcErr
	WCRNRRetryExcErr
	WCFatalErr
	WCGeneralErr
)

var wcStatusNames = [...]string{"success", "local length error", "local QP operation error", "local protection error", "work request flushed error", "bad response error", "local access error", "remote invalid request error", "remote access error", "remote operation error", "transport retry counter exceeded", "RNR retry counter exceeded", "fatal error", "general error"}

func (s WCStatus) String() string {
	if int(s) < len(wcStatusNames) {
		return wcStatusNames[s]
	}
	return fmt.Sprintf("WCStatus(%d)", uint8(s))
}

// WCOpcode is the operation a completion reports (ibv_wc_opcode).
type WCOpcode uint8

// Completion opcodes.
const (
	WCSend WCOpcode = iota
	WCRDMAWrite
	WCRDMARead
	WCCompSwap
	WCFetchAdd
	WCRecv
	WCRecvRDMAWithImm
)

var wcOpcodeNames = [...]string{"SEND", "RDMA_WRITE", "RDMA_READ", "COMP_SWAP", "FETCH_ADD", "RECV", "RECV_RDMA_WITH_IMM"}

func (o WCOpcode) String() string {
	if int(o) < len(wcOpcodeNames) {
		return wcOpcodeNames[o]
	}
	return fmt.Sprintf("WCOpcode(%d)", uint8(o))
}

func wcOpcodeFor(o WROpcode) WCOpcode {
	switch o {
	case WRRDMAWrite, WRRDMAWriteWithImm:
		return WCRDMAWrite
	case WRRDMARead:
		return WCRDMARead
	case WRAtomicCmpAndSwp:
		return WCCompSwap
	case WRAtomicFetchAndAdd:
		return WCFetchAdd
	}
	return WCSend
}

// WCFlags say which optional completion fields are valid.
type WCFlags uint8

// Completion flags.
const (
	WCWithImm WCFlags = 1 << iota
	WCGRH             // a UD receive: the first 40 bytes hold the GRH
)

// WorkCompletion is one completion (ibv_wc).
type WorkCompletion struct {
	ID      uint64
	Status  WCStatus
	Opcode  WCOpcode
	Flags   WCFlags
	ByteLen uint32
	Imm     uint32 // host order, valid with WCWithImm
	QPN     uint32 // the local QP
	SrcQP   uint32 // UD: the sender's QP
	Src     netip.AddrPort
}

// AH is an address handle: where UD sends go (ibv_ah). In RoCEv2 the GID is
// an IP address; here it comes with the UDP port of the peer device.
type AH struct {
	pd   *PD
	flow wire.Flow
	Dest netip.AddrPort
}
