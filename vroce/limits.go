package vroce

import (
	"fmt"
	"slices"
)

// DeviceAttr holds a device's limits: the published vRoCE specification
// (../shared/SPEC.md) with max_qp from the instance size.
type DeviceAttr struct {
	MaxQP        int // max_qp_num
	MaxCQ        int // 2 x MaxQP
	MaxMR        int // 2 x MaxQP
	MaxPD        int
	MaxSRQ       int
	MaxQPWR      int // max_send_wr and max_recv_wr
	MaxSendSGE   int
	MaxRecvSGE   int
	MaxCQE       int // max CQ depth
	MaxSRQWR     int
	MaxSRQSGE    int
	MaxInline    int // max_inline_data
	MaxQPRdAtom  int // outstanding RDMA READ/atomic per QP, each direction
	MaxMRSize    uint64
	MaxMsgSize   int // largest message (SEND, WRITE, READ)
	ActiveMTU    MTU // largest path MTU the provider's link carries
	MaxBacklogCM int // default max_backlog for the connection manager
	// UDPChecksum: the provider verifies every datagram's UDP checksum
	// (UDPChecksummer), so RC QPs may leave out the ICRC
	// (QPAttr.UDPChecksum).
	UDPChecksum bool
}

// Published limits (SPEC.md).
const (
	DefaultMaxQP      = 262144
	SpecMaxQPWR       = 8191
	SpecMaxSendSGE    = 12
	SpecMaxRecvSGE    = 16
	SpecMaxCQE        = 8388607
	DefaultMaxBacklog = 1024
	maxInlineData     = 256
	maxQPRdAtom       = 128
	maxMsgSize        = 1 << 31
)

func deviceAttr(maxQP int, mtu MTU) DeviceAttr {
	return DeviceAttr{
		MaxQP:        maxQP,
		MaxCQ:        2 * maxQP,
		MaxMR:        2 * maxQP,
		MaxPD:        maxQP,
		MaxSRQ:       maxQP,
		MaxQPWR:      SpecMaxQPWR,
		MaxSendSGE:   SpecMaxSendSGE,
		MaxRecvSGE:   SpecMaxRecvSGE,
		MaxCQE:       SpecMaxCQE,
		MaxSRQWR:     SpecMaxQPWR,
		MaxSRQSGE:    SpecMaxRecvSGE,
		MaxInline:    maxInlineData,
		MaxQPRdAtom:  maxQPRdAtom,
		MaxMRSize:    1 << 40,
		MaxMsgSize:   maxMsgSize,
		ActiveMTU:    mtu,
		MaxBacklogCM: DefaultMaxBacklog,
	}
}

// MTU is a path MTU: the payload bytes per packet.
type MTU int

// The path MTUs RoCEv2 allows.
const (
	MTU256  MTU = 256
	MTU512  MTU = 512
	MTU1024 MTU = 1024
	MTU2048 MTU = 2048
	MTU4096 MTU = 4096
)

// Other path MTUs are a vRoCE extension: two vRoCE peers negotiate them
// (vroce/cm) where the link carries them, loopback or jumbo frames. A
// packet costs the same whatever its size, so eight times the payload
// per packet is most of the way to kernel TCP's 64 KiB segments. rdma_rxe
// and RoCE NICs stop at 4096; UD stays there too. MTU1344 is for the
// ordinary 1500-byte link (and 1460, and IPv6's 40-byte header), where
// the largest IB MTU, 1024, leaves 30% of every frame empty: between two
// namespaces over veth at MTU 1500, a packet of 2048 cost 0.34-0.42 s of
// CPU per GiB where one of 1024 cost 0.54-0.69, so a packet's cost is
// mostly its own, not its bytes'.
const (
	MTU1344  MTU = 1344
	MTU8192  MTU = 8192
	MTU16384 MTU = 16384
	MTU32768 MTU = 32768
)

func (m MTU) String() string { return fmt.Sprintf("MTU%d", int(m)) }

// pathMTUs are the path MTUs vRoCE takes, the IB MTUs and the extension
// MTUs, smallest first.
var pathMTUs = [...]MTU{MTU256, MTU512, MTU1024, MTU1344, MTU2048, MTU4096, MTU8192, MTU16384, MTU32768}

// Valid reports whether m is one of the five IB MTUs or an extension MTU.
func (m MTU) Valid() bool { return slices.Contains(pathMTUs[:], m) }

// notValidf is the error for a path MTU that is not Valid.
func notValidf(op string, m MTU) error {
	return invalidf("%s: path MTU %d is not one of %v (the IB MTUs and vRoCE's extensions)", op, int(m), pathMTUs)
}

// IB is the largest of the five IB MTUs not above m: what a peer that
// knows no extension (rdma_rxe, a NIC, a UD peer) is told and sent. It
// is 0 for m below 256, which no path MTU is.
func (m MTU) IB() MTU {
	var ib MTU
	for v := MTU256; v <= MTU4096 && v <= m; v *= 2 {
		ib = v
	}
	return ib
}

// mtuForLink is the largest MTU whose packets fit a link carrying linkMTU
// bytes of UDP payload (room for the largest header set and ICRC).
func mtuForLink(linkMTU int) MTU {
	const overhead = 64 + 4
	for _, m := range slices.Backward(pathMTUs[:]) {
		if int(m)+overhead <= linkMTU {
			return m
		}
	}
	return MTU256
}
