package vroce

import (
	"net/netip"
	"sync"
	"sync/atomic"

	"vroce.dev/vroce/wire"
)

// The general services interface: QP1, which carries management datagrams
// (MADs), the connection manager's among them. On RoCEv2 a MAD is a UD
// SEND_ONLY to QPN 1 with the well-known GSI Q_Key. A device has one GSI
// owner (vroce/cm); the device hands it every valid MAD from its receive
// goroutine, so management traffic costs no goroutine of its own.

const (
	// GSIQPN is the QP number of the general services interface.
	GSIQPN = 1
	// GSIQKey is the Q_Key every GSI datagram carries.
	GSIQKey = 0x80010000
	// MADSize is the size of a management datagram.
	MADSize = 256
	// maxGSIFlows bounds the cache of resolved flows; past it the cache
	// starts over, so a stream of strangers cannot grow it.
	maxGSIFlows = 1 << 12
)

// MADHandler receives a MAD and the address of the device that sent it.
// It runs on the goroutine receiving for the device (the device's receive
// goroutine, or a CQ waiter holding the receive turn): it must not block,
// and mad is valid only until it returns.
type MADHandler func(from netip.AddrPort, mad []byte)

// GSI is an open general services interface.
type GSI struct {
	d       *Device
	handler MADHandler
	psn     atomic.Uint32

	mu    sync.Mutex // guards flows
	flows map[netip.AddrPort]wire.Flow
}

// OpenGSI claims the device's QP1: from now on h receives every MAD that
// arrives. A device has one GSI at a time; a second gets ErrBusy.
func (d *Device) OpenGSI(h MADHandler) (*GSI, error) {
	if h == nil {
		return nil, invalidf("open GSI: no handler")
	}
	if d.isClosed() {
		return nil, ErrClosed
	}
	g := &GSI{d: d, handler: h, flows: map[netip.AddrPort]wire.Flow{}}
	if !d.gsi.CompareAndSwap(nil, g) {
		return nil, busyf("open GSI: QP1 already has an owner")
	}
	return g, nil
}

// Close releases QP1; MADs arriving afterwards are dropped. The handler
// may still be running when Close returns, finishing its last MAD.
func (g *GSI) Close() error {
	g.d.gsi.CompareAndSwap(g, nil)
	return nil
}

// Send sends one MAD (exactly MADSize bytes) to the GSI of the device at
// to. Like any datagram it may be lost; retrying is the caller's protocol.
func (g *GSI) Send(to netip.AddrPort, mad []byte) error {
	if len(mad) != MADSize {
		return invalidf("GSI send: a MAD is %d bytes, not %d", MADSize, len(mad))
	}
	d := g.d
	if d.isClosed() || d.gsi.Load() != g {
		return ErrClosed
	}
	flow, err := g.flowTo(to)
	if err != nil {
		return err
	}
	b := d.getBatch()
	defer d.putBatch(b)
	buf := b.buf()
	n, err := encodeMAD(buf, g.psn.Add(1)&psnMask, mad)
	if err != nil {
		return err
	}
	b.add(flow, n)
	d.transmit(b)
	return nil
}

// encodeMAD lays mad out in buf as a GSI datagram (a UD SEND_ONLY from and
// to QP1, with the GSI Q_Key) and returns its length; the ICRC is the
// sender's to seal.
func encodeMAD(buf []byte, psn uint32, mad []byte) (int, error) {
	p := wire.Packet{
		BTH:  wire.BTH{Opcode: wire.UDSendOnly, PKey: wire.DefaultPKey, DestQP: GSIQPN, PSN: psn},
		DETH: wire.DETH{QKey: GSIQKey, SrcQP: GSIQPN},
	}
	hl, err := p.EncodeHeaders(buf, MADSize)
	if err != nil {
		return 0, err
	}
	copy(buf[hl:], mad)
	return wire.Finish(buf, hl+MADSize), nil
}

// isMAD reports whether p is a management datagram for QP1.
func isMAD(p *wire.Packet) bool {
	return p.BTH.DestQP == GSIQPN && p.BTH.Opcode == wire.UDSendOnly && p.DETH.QKey == GSIQKey && len(p.Payload) == MADSize
}

func (g *GSI) flowTo(to netip.AddrPort) (wire.Flow, error) {
	g.mu.Lock()
	f, ok := g.flows[to]
	g.mu.Unlock()
	if ok {
		return f, nil
	}
	f, err := g.d.flowTo(to)
	if err != nil {
		return f, err
	}
	g.mu.Lock()
	if len(g.flows) >= maxGSIFlows {
		clear(g.flows)
	}
	g.flows[to] = f
	g.mu.Unlock()
	return f, nil
}

// receiveGSI hands a datagram for QP1 to the GSI owner, if it is a MAD.
func (d *Device) receiveGSI(p *wire.Packet, from netip.AddrPort) {
	g := d.gsi.Load()
	if g == nil || !isMAD(p) {
		d.stats.rxNoQP.Add(1)
		return
	}
	d.stats.rxMADs.Add(1)
	g.handler(from, p.Payload)
}
