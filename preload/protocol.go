package preload

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strconv"

	"vroce.dev/rsock"

	"golang.org/x/sys/unix"
)

// The control messages, little-endian, fixed size; preload/c/vroce-preload.c
// writes and reads the same layout.
//
//	0  uint32 magic (version)
//	4  uint32 op
//	8  int32  errno (replies)
//	12 uint32 flags
//	16 addr   local
//	40 addr   peer
//
// An addr is uint16 family (AF_INET, AF_INET6), uint16 port, uint32
// scope, [16]byte address. A stats reply is followed by statsSize bytes
// of counters.
const (
	magic       = 0x31447276 // "vrD1"
	messageSize = 64
	addrSize    = 24
	statsSize   = 7 * 8
	// acceptSize is an accept-queue message: uint32 flags, local, peer.
	acceptSize = 4 + 2*addrSize
)

// Ops of a request.
const (
	opHello   = 1 // flags: the process's pid; no reply
	opConnect = 2 // peer: where to; one descriptor: the socket
	// opListen: one descriptor, a TCP socket the program calls listen
	// on, not listening yet. The daemon listens on it (the interposer
	// does when the daemon will not).
	opListen = 3
	opStats  = 4 // reply: the counters
	// opResult asks how a non-blocking connect ended (flags: its ID);
	// the reply comes when it has: errno, local, peer.
	opResult = 5
	// opLinger0 (flags: a stream's ID): the program set SO_LINGER 0;
	// its close resets the stream.
	opLinger0 = 6
	// opInfo (flags: a stream's ID): the reply is followed by infoSize
	// bytes of the stream's transport state, for TCP_INFO.
	opInfo = 7
)

// Flags of a reply, and of an accept-queue message.
const (
	// flagSwap: a descriptor comes with the reply (a socketpair end to
	// put in place of the program's; for listen, the accept queue).
	flagSwap = 1
	// flagAsync, on a connect: the socket is non-blocking; reply at once
	// with a placeholder to swap in and the connect's ID in flags>>8.
	flagAsync = 2
)

// errBadMessage is wrapped by every error of a malformed control message.
var errBadMessage = errors.New("vroced: bad control message")

// message is a control request or reply.
type message struct {
	op    uint32
	errno int32
	flags uint32
	local netip.AddrPort
	peer  netip.AddrPort
}

// decodeRequest parses a request read from the control socket.
func decodeRequest(b []byte) (message, error) {
	var m message
	if len(b) != messageSize {
		return m, fmt.Errorf("%w: %d bytes, want %d", errBadMessage, len(b), messageSize)
	}
	if got := binary.LittleEndian.Uint32(b); got != magic {
		return m, fmt.Errorf("%w: magic %#x, want %#x (an interposer from another build?)", errBadMessage, got, magic)
	}
	m.op = binary.LittleEndian.Uint32(b[4:])
	m.errno = int32(binary.LittleEndian.Uint32(b[8:]))
	m.flags = binary.LittleEndian.Uint32(b[12:])
	var err error
	if m.local, err = decodeAddr(b[16:40]); err != nil {
		return m, err
	}
	if m.peer, err = decodeAddr(b[40:64]); err != nil {
		return m, err
	}
	switch m.op {
	case opHello, opListen, opStats, opResult, opLinger0, opInfo:
	case opConnect:
		if !m.peer.IsValid() || m.peer.Port() == 0 {
			return m, fmt.Errorf("%w: connect to %v", errBadMessage, m.peer)
		}
	default:
		return m, fmt.Errorf("%w: op %d", errBadMessage, m.op)
	}
	return m, nil
}

// encode writes m: a request and a reply have the same layout.
func (m message) encode() []byte {
	b := make([]byte, messageSize)
	binary.LittleEndian.PutUint32(b, magic)
	binary.LittleEndian.PutUint32(b[4:], m.op)
	binary.LittleEndian.PutUint32(b[8:], uint32(m.errno))
	binary.LittleEndian.PutUint32(b[12:], m.flags)
	putAddr(b[16:40], m.local)
	putAddr(b[40:64], m.peer)
	return b
}

// decodeAddr reads an addr; family 0 is "none".
func decodeAddr(b []byte) (netip.AddrPort, error) {
	family := binary.LittleEndian.Uint16(b)
	port := binary.LittleEndian.Uint16(b[2:])
	switch family {
	case 0:
		return netip.AddrPort{}, nil
	case unix.AF_INET:
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[8:12])), port), nil
	case unix.AF_INET6:
		ip := netip.AddrFrom16([16]byte(b[8:24]))
		if scope := binary.LittleEndian.Uint32(b[4:]); scope != 0 {
			ip = ip.WithZone(fmt.Sprint(scope))
		}
		return netip.AddrPortFrom(ip, port), nil
	}
	return netip.AddrPort{}, fmt.Errorf("%w: address family %d", errBadMessage, family)
}

// putAddr writes an addr: IPv4 (and IPv4-mapped) as AF_INET.
func putAddr(b []byte, a netip.AddrPort) {
	clear(b[:addrSize])
	if !a.IsValid() {
		return
	}
	ip := a.Addr().Unmap()
	binary.LittleEndian.PutUint16(b[2:], a.Port())
	if ip.Is4() {
		binary.LittleEndian.PutUint16(b, unix.AF_INET)
		v := ip.As4()
		copy(b[8:], v[:])
		return
	}
	binary.LittleEndian.PutUint16(b, unix.AF_INET6)
	if scope, err := strconv.ParseUint(ip.Zone(), 10, 32); err == nil {
		binary.LittleEndian.PutUint32(b[4:], uint32(scope))
	}
	v := ip.As16()
	copy(b[8:], v[:])
}

// encodeAccept is an accept-queue message.
func encodeAccept(flags uint32, local, peer netip.AddrPort) []byte {
	b := make([]byte, acceptSize)
	binary.LittleEndian.PutUint32(b, flags)
	putAddr(b[4:], local)
	putAddr(b[4+addrSize:], peer)
	return b
}

// Stats count what went over vRoCE and what over TCP.
type Stats struct {
	Processes  uint64 // interposed processes that said hello
	VRoCEConns uint64
	VRoCECM    uint64 // of VRoCEConns, dialled with RDMA_CM (no TCP at all)
	VRoCEBytes uint64
	TCPConns   uint64
	TCPBytes   uint64 // bridged plain TCP only: a kept socket is the program's
	Resets     uint64 // streams their peer reset (the program sees EOF)
}

func (s Stats) encode() []byte {
	b := make([]byte, statsSize)
	for i, v := range []uint64{s.Processes, s.VRoCEConns, s.VRoCEBytes, s.TCPConns, s.TCPBytes, s.VRoCECM, s.Resets} {
		binary.LittleEndian.PutUint64(b[8*i:], v)
	}
	return b
}

// infoSize is a stream's transport state after an opInfo reply: uint32
// RTT and minimum RTT in microseconds, retransmissions, timeouts,
// congestion window (packets) and path MTU; uint64 packets sent and
// received.
const infoSize = 6*4 + 2*8

func encodeInfo(i rsock.Info) []byte {
	b := make([]byte, infoSize)
	for k, v := range []uint32{uint32(i.RTT.Microseconds()), uint32(i.MinRTT.Microseconds()), uint32(i.Retransmits), uint32(i.Timeouts), uint32(i.CWnd), uint32(i.MTU)} {
		binary.LittleEndian.PutUint32(b[4*k:], v)
	}
	binary.LittleEndian.PutUint64(b[24:], i.TxPackets)
	binary.LittleEndian.PutUint64(b[32:], i.RxPackets)
	return b
}

func decodeStats(b []byte) (Stats, error) {
	if len(b) != statsSize {
		return Stats{}, fmt.Errorf("%w: stats of %d bytes", errBadMessage, len(b))
	}
	u := func(i int) uint64 { return binary.LittleEndian.Uint64(b[8*i:]) }
	return Stats{Processes: u(0), VRoCEConns: u(1), VRoCEBytes: u(2), TCPConns: u(3), TCPBytes: u(4), VRoCECM: u(5), Resets: u(6)}, nil
}
