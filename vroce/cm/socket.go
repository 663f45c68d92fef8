package cm

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"

	"vroce.dev/vroce"
)

// The SOCKET exchange message, sent by each end, big-endian:
//
//	magic "vRCE" | version 2 | flags 2 | QPN 4 | PSN 4 | MTU 2 | port 2 |
//	IP 16 (IPv4 mapped) | private data length 1 | private data 0-56
const (
	magic     = "vRCE"
	version   = 1
	headerLen = 4 + 2 + 2 + 4 + 4 + 2 + 2 + 16 + 1
	flagSACK  = 1 << 0
	flagPiggy = 1 << 1 // ACKs ride on requests (wire.PiggyACK)
	// flagDevicePort: RC packets leave from the advertised port, so the
	// peer may refuse any other (vroce.QPAttr StrictSourcePort).
	flagDevicePort = 1 << 2
	// flagUDPChecksum: the sender's provider verifies UDP checksums and
	// it would leave the ICRC out (vroce.QPAttr UDPChecksum).
	flagUDPChecksum = 1 << 3
)

// SocketMagic opens every SOCKET exchange: a listener that serves plain
// TCP clients on the same port tells the two apart by it.
const SocketMagic = magic

// Errors a caller can test with errors.Is.
var (
	// ErrNotVRoCE: the peer sent something that is not the exchange (a
	// plain TCP server, say): the stream layer falls back on it.
	ErrNotVRoCE = errors.New("cm: peer does not speak the vRoCE SOCKET exchange")
	// ErrVersion: the peer speaks another version of the exchange.
	ErrVersion = errors.New("cm: peer speaks another exchange version")
)

// Params shape the connection this end offers.
type Params struct {
	Access      vroce.Access // remote access this end allows
	MTU         vroce.MTU    // the largest path MTU to use; 0: the device's
	Timeout     uint8        // local ACK timeout; 0 means 14 (67 ms)
	RetryCnt    uint8        // 0 means 7
	RNRRetry    uint8        // 0 means 7 (infinite)
	MinRNRTimer uint8        // 0 means 1 (10 us)
	// MaxRdAtomic is how many READ and atomic requests this end answers
	// at once and issues at once, at most what the peer answers (an RDMA
	// CM peer says so); 0 means 128, the device's max_qp_rd_atom, as rxe
	// offers: our responder keeps nothing per outstanding READ.
	MaxRdAtomic int
	GoBackN     bool   // offer no vRoCE extension (selective repeat, piggybacked ACKs, no ICRC): behave as rxe
	PrivateData []byte // up to MaxPrivateData bytes for the peer
	// Advertise is the address the peer sends vRoCE packets to; zero:
	// the device's address, or, when it listens on all addresses, the
	// local address of conn with the device's port.
	Advertise netip.AddrPort
	// Service is the RDMA_CM service port to connect to; 0 means the
	// port of the address connected to.
	Service uint16
}

// Peer is what the other end told us.
type Peer struct {
	QPN             uint32
	PSN             uint32
	Addr            netip.AddrPort
	MTU             vroce.MTU // as negotiated: the smaller of the two
	SelectiveRepeat bool      // both ends speak it
	PiggybackACK    bool      // both ends speak it
	// StrictSourcePort: the peer sends from Addr's port and said so
	// (vroce.QPAttr.StrictSourcePort).
	StrictSourcePort bool
	// UDPChecksum: both ends' providers verify UDP checksums and both
	// leave the ICRC out (vroce.QPAttr.UDPChecksum).
	UDPChecksum bool
	// MaxRdAtomic is how many READ and atomic requests the peer answers
	// at once (its responder resources); 0: as many as we do.
	MaxRdAtomic int
	PrivateData []byte
}

// hello is one end's exchange message.
type hello struct {
	flags       uint16
	qpn, psn    uint32
	mtu         uint16
	addr        netip.AddrPort
	privateData []byte
}

func (h *hello) marshal() []byte {
	b := make([]byte, headerLen+len(h.privateData))
	copy(b, magic)
	binary.BigEndian.PutUint16(b[4:], version)
	binary.BigEndian.PutUint16(b[6:], h.flags)
	binary.BigEndian.PutUint32(b[8:], h.qpn)
	binary.BigEndian.PutUint32(b[12:], h.psn)
	binary.BigEndian.PutUint16(b[16:], h.mtu)
	binary.BigEndian.PutUint16(b[18:], h.addr.Port())
	ip := h.addr.Addr().As16()
	copy(b[20:36], ip[:])
	b[36] = byte(len(h.privateData))
	copy(b[headerLen:], h.privateData)
	return b
}

// parseHeader decodes the fixed part of a hello; it reports how much
// private data follows.
func parseHeader(b []byte, h *hello) (int, error) {
	if len(b) < headerLen || string(b[:4]) != magic {
		return 0, ErrNotVRoCE
	}
	if v := binary.BigEndian.Uint16(b[4:]); v != version {
		return 0, fmt.Errorf("%w: %d, we speak %d", ErrVersion, v, version)
	}
	h.flags = binary.BigEndian.Uint16(b[6:])
	h.qpn = binary.BigEndian.Uint32(b[8:])
	h.psn = binary.BigEndian.Uint32(b[12:])
	h.mtu = binary.BigEndian.Uint16(b[16:])
	port := binary.BigEndian.Uint16(b[18:])
	h.addr = netip.AddrPortFrom(netip.AddrFrom16([16]byte(b[20:36])).Unmap(), port)
	n := int(b[36])
	switch {
	case h.qpn > 0xffffff || h.qpn < 2 || h.psn > 0xffffff:
		return 0, fmt.Errorf("%w: QPN %#x, PSN %#x out of range", ErrNotVRoCE, h.qpn, h.psn)
	case !vroce.MTU(h.mtu).Valid():
		return 0, fmt.Errorf("%w: MTU %d", ErrNotVRoCE, h.mtu)
	case port == 0 || h.addr.Addr().IsUnspecified():
		return 0, fmt.Errorf("%w: address %v", ErrNotVRoCE, h.addr)
	case n > MaxPrivateData:
		return 0, fmt.Errorf("%w: %d bytes of private data", ErrNotVRoCE, n)
	}
	return n, nil
}

// readHello reads the peer's hello from r.
func readHello(r io.Reader) (*hello, error) {
	var head [headerLen]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: %v", ErrNotVRoCE, err)
		}
		return nil, err
	}
	h := new(hello)
	n, err := parseHeader(head[:], h)
	if err != nil {
		return nil, err
	}
	if n > 0 {
		h.privateData = make([]byte, n)
		if _, err := io.ReadFull(r, h.privateData); err != nil {
			return nil, fmt.Errorf("%w: private data: %v", ErrNotVRoCE, err)
		}
	}
	return h, nil
}

// ConnectSocket connects qp, an RC QP in RESET, to the QP at the other end
// of conn, which calls ConnectSocket at the same time. On success qp is in
// RTS. ctx bounds the exchange; conn stays open for the caller.
func ConnectSocket(ctx context.Context, conn net.Conn, qp *vroce.QP, p Params) (Peer, error) {
	if qp.Type() != vroce.RC {
		return Peer{}, fmt.Errorf("cm: SOCKET connects RC QPs, not %v", qp.Type())
	}
	if len(p.PrivateData) > MaxPrivateData {
		return Peer{}, fmt.Errorf("cm: %d bytes of private data exceed %d", len(p.PrivateData), MaxPrivateData)
	}
	dev := qp.Device()
	mtu := p.mtu(dev)
	adv := p.Advertise
	if !adv.IsValid() {
		adv = dev.LocalAddr()
		if adv.Addr().IsUnspecified() {
			local, ok := conn.LocalAddr().(*net.TCPAddr)
			if !ok {
				return Peer{}, fmt.Errorf("cm: cannot tell which address to advertise over %v", conn.LocalAddr())
			}
			adv = netip.AddrPortFrom(local.AddrPort().Addr().Unmap(), adv.Port())
		}
	}
	var rnd [4]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return Peer{}, err
	}
	ours := hello{flags: flagDevicePort, qpn: qp.QPN(), psn: binary.BigEndian.Uint32(rnd[:]) & 0xffffff, mtu: uint16(mtu), addr: adv, privateData: p.PrivateData}
	if !p.GoBackN {
		ours.flags |= flagSACK | flagPiggy
	}
	if p.offersUDPChecksum(qp.Device()) {
		ours.flags |= flagUDPChecksum
	}
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
		defer conn.SetDeadline(time.Time{})
	}
	// Cancelling ctx interrupts the exchange through a past deadline; if
	// that races with success, the deadline is cleared again below.
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	// Both ends write first: the message is small enough that neither
	// blocks on the other's reading.
	werr := make(chan error, 1)
	go func() {
		_, err := conn.Write(ours.marshal())
		werr <- err
	}()
	theirs, rerr := readHello(conn)
	if err := <-werr; err != nil && rerr == nil {
		rerr = err
	}
	if !stop() && rerr == nil {
		conn.SetDeadline(time.Time{}) // the cancellation came too late to matter
	}
	if rerr != nil {
		if ctx.Err() != nil {
			return Peer{}, fmt.Errorf("cm: exchange: %w", ctx.Err())
		}
		return Peer{}, fmt.Errorf("cm: exchange: %w", rerr)
	}
	if theirs.qpn == ours.qpn && theirs.psn == ours.psn && theirs.addr == ours.addr {
		// Our own message came back: the other end echoes what it is
		// sent (a plain TCP echo service, or a listener that took us
		// for a plain TCP client). Connecting would aim the QP at
		// itself, and the stream would echo the application's data.
		return Peer{}, fmt.Errorf("cm: exchange: the peer sent our own message back: %w", ErrNotVRoCE)
	}
	peer := Peer{
		QPN: theirs.qpn, PSN: theirs.psn, Addr: theirs.addr,
		MTU:              min(mtu, vroce.MTU(theirs.mtu)),
		SelectiveRepeat:  ours.flags&theirs.flags&flagSACK != 0,
		PiggybackACK:     ours.flags&theirs.flags&flagPiggy != 0,
		StrictSourcePort: ours.flags&theirs.flags&flagDevicePort != 0,
		UDPChecksum:      ours.flags&theirs.flags&flagUDPChecksum != 0,
		PrivateData:      theirs.privateData,
	}
	if err := Connect(qp, ours.psn, peer, p); err != nil {
		return Peer{}, err
	}
	return peer, nil
}

// Connect moves qp, in RESET, through INIT and RTR to RTS aimed at peer,
// sending from sqPSN: the last step of every connection mode, for callers
// that learned the peer's details some other way.
func Connect(qp *vroce.QP, sqPSN uint32, peer Peer, p Params) error {
	rd := int(p.rdAtomic())
	issue := rd
	if peer.MaxRdAtomic > 0 {
		issue = min(rd, peer.MaxRdAtomic)
	}
	steps := []struct {
		a vroce.QPAttr
		m vroce.QPAttrMask
	}{
		{vroce.QPAttr{State: vroce.QPSInit, AccessFlags: p.Access | vroce.AccessLocalWrite}, vroce.QPAttrState | vroce.QPAttrAccessFlags},
		{vroce.QPAttr{State: vroce.QPSRTR, Dest: peer.Addr, PathMTU: peer.MTU, DestQPN: peer.QPN, RQPSN: peer.PSN,
			MaxDestRdAtomic: rd, MinRNRTimer: or(p.MinRNRTimer, 1), SelectiveRepeat: peer.SelectiveRepeat, PiggybackACK: peer.PiggybackACK,
			StrictSourcePort: peer.StrictSourcePort, UDPChecksum: peer.UDPChecksum},
			vroce.QPAttrState | vroce.QPAttrAV | vroce.QPAttrPathMTU | vroce.QPAttrDestQPN | vroce.QPAttrRQPSN |
				vroce.QPAttrMaxDestRdAtomic | vroce.QPAttrMinRNRTimer | vroce.QPAttrSelectiveRepeat | vroce.QPAttrPiggybackACK |
				vroce.QPAttrStrictSourcePort | vroce.QPAttrUDPChecksum},
		{vroce.QPAttr{State: vroce.QPSRTS, SQPSN: sqPSN, Timeout: or(p.Timeout, 14), RetryCnt: or(p.RetryCnt, 7),
			RNRRetry: or(p.RNRRetry, 7), MaxRdAtomic: issue},
			vroce.QPAttrState | vroce.QPAttrSQPSN | vroce.QPAttrTimeout | vroce.QPAttrRetryCnt | vroce.QPAttrRNRRetry | vroce.QPAttrMaxQPRdAtomic},
	}
	for _, s := range steps {
		if err := qp.Modify(&s.a, s.m); err != nil {
			return fmt.Errorf("cm: connect QP %#x: %w", qp.QPN(), err)
		}
	}
	return nil
}
