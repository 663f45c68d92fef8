package vroce

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"

	"vroce.dev/internal/clock"
	"vroce.dev/internal/minheap"
	"vroce.dev/vroce/wire"
)

// Config opens a device.
type Config struct {
	// Provider names the packet I/O: "udp" (default), "sim", "afxdp",
	// "plugin:NAME" or "plugin:/path/to/binary" (providers/plugin). Empty
	// means $VROCE_PROVIDER, then "udp".
	Provider string
	// Addr is the local address, "host:port"; the port is the device's
	// RoCEv2 UDP port (4791 unless several devices share a host).
	Addr string
	// ProviderOptions are passed to the provider (see its package).
	ProviderOptions any
	// MaxQP is max_qp_num, from the instance size; 0 means 262,144.
	MaxQP int
	// MTU caps the active path MTU (an IB MTU, or an extension MTU:
	// MTU1344, MTU8192-MTU32768); 0 derives it from the link.
	MTU MTU
	// PcapPath records every frame sent and received to a pcap file;
	// empty means $VROCE_PCAP (unset: no capture).
	PcapPath string
}

// Device is an open vRoCE device: the verbs context (ibv_context) and the
// transport engine behind it. Its goroutines (one receiving, one running
// timers) serve every QP, the receiving one giving way to a CQ waiter
// that receives for itself (receiveTurn); Close stops them.
type Device struct {
	prov  Provider
	batch BatchReceiver // prov, when it is one (recvInto); nil otherwise
	attr  DeviceAttr
	local netip.AddrPort
	epoch clock.Epoch

	mu     sync.Mutex // guards closed and the resource counts
	closed bool
	count  struct{ qp, cq, mr, pd, srq int }

	qpTable *table[QP] // by QPN: the receive path finds QPs here
	// MRs by key: every local access check finds them by lkey, every
	// remote one by rkey. The two keys are drawn apart, so an lkey a
	// peer learns of (or guesses) opens nothing.
	mrByLKey, mrByRKey *table[MR]

	atomicMu sync.Mutex  // remote atomics execute one at a time per device
	held     heldPool    // out-of-order requests kept for selective repeat
	peers    peerBudgets // what RC QPs keep in flight to each peer, together
	timers   timerQueue
	gsi      atomic.Pointer[GSI] // QP1's owner, if any
	events   eventQueue
	pcap     *pcapRecorder
	batches  sync.Pool
	stats    deviceCounters
	// handedOff: a completion woke a waiting goroutine since the
	// receive loop last looked (set by CQ.push).
	handedOff atomic.Bool
	handlers  handlerQueue // CQ completion handlers due after a batch
	yield     yieldGate    // owned by the receive turn's holder
	sched     schedLatency // the scheduler's delay, which timers allow for
	sending   sendStall    // whether a send of ours is stuck, which timers wait out
	turn      receiveTurn  // who receives from the provider
	done      chan struct{}
	wg        sync.WaitGroup
}

// Open opens a device on the provider cfg names.
func Open(cfg Config) (*Device, error) {
	p, err := OpenProvider(cfg.Provider, ProviderConfig{Addr: cfg.Addr, Options: cfg.ProviderOptions})
	if err != nil {
		return nil, err
	}
	d, err := OpenWithProvider(p, cfg)
	if err != nil {
		p.Close()
	}
	return d, err
}

// OpenWithProvider opens a device on a provider the caller created. The
// device owns p from then on and closes it.
func OpenWithProvider(p Provider, cfg Config) (*Device, error) {
	maxQP := cfg.MaxQP
	if maxQP == 0 {
		maxQP = DefaultMaxQP
	}
	if maxQP < 0 || maxQP > 1<<23 {
		return nil, invalidf("open: max_qp %d out of range 1-%d", maxQP, 1<<23)
	}
	mtu := mtuForLink(p.MTU())
	if cfg.MTU != 0 {
		if !cfg.MTU.Valid() {
			return nil, notValidf("open", cfg.MTU)
		}
		mtu = min(mtu, cfg.MTU)
	}
	batch, _ := p.(BatchReceiver)
	attr := deviceAttr(maxQP, mtu)
	if c, ok := p.(UDPChecksummer); ok {
		attr.UDPChecksum = c.VerifiesUDPChecksum()
	}
	d := &Device{
		prov:     p,
		batch:    batch,
		attr:     attr,
		local:    p.LocalAddr(),
		epoch:    clock.NewEpoch(),
		qpTable:  newTable(func(qp *QP) uint32 { return qp.qpn }),
		mrByLKey: newTable(func(mr *MR) uint32 { return mr.lkey }),
		mrByRKey: newTable(func(mr *MR) uint32 { return mr.rkey }),
		done:     make(chan struct{}),
	}
	clk, err := clock.New(d.epoch.Time())
	if err != nil {
		return nil, fmt.Errorf("vroce: open: timer: %w", err)
	}
	d.timers.clock, d.timers.armed = clk, idleDeadline
	d.timers.h = minheap.New(earlier, nil)
	d.events.init()
	d.turn.init(d, p, mtu)
	size := packetSize(mtu)
	d.batches.New = func() any { return newTxBatch(p.BatchSize(), size) }
	path := cfg.PcapPath
	if path == "" {
		path = os.Getenv("VROCE_PCAP")
	}
	if path != "" {
		rec, err := newPcapRecorder(path)
		if err != nil {
			return nil, fmt.Errorf("vroce: open: %w", err)
		}
		d.pcap = rec
	}
	d.wg.Add(2)
	go d.rxLoop()
	go d.timerLoop()
	return d, nil
}

// Attr returns the device's limits.
func (d *Device) Attr() DeviceAttr { return d.attr }

// LocalAddr is the address peers reach this device at.
func (d *Device) LocalAddr() netip.AddrPort { return d.local }

// Close destroys every object of the device, stops its goroutines and
// closes the provider. Outstanding work is flushed first.
func (d *Device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	d.mu.Unlock()
	d.failQPs()
	close(d.done)
	d.stopTimers()
	err := d.prov.Close()
	d.wg.Wait()
	d.events.close()
	if d.pcap != nil {
		if perr := d.pcap.close(); err == nil {
			err = perr
		}
	}
	return err
}

func (d *Device) isClosed() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

// now is the device clock: monotonic nanoseconds since Open.
func (d *Device) now() int64 { return d.epoch.Now() }

// reserve counts one more object against a limit, or fails with a
// *LimitError naming it.
func (d *Device) reserve(op, limit string, n *int, max int) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return ErrClosed
	}
	if err := checkLimit(op, limit, *n+1, max); err != nil {
		return err
	}
	*n++
	return nil
}

func (d *Device) release(n *int) {
	d.mu.Lock()
	*n--
	d.mu.Unlock()
}

// flowTo returns the UDP/IP flow from this device to dst, resolving the
// source address through the routing table when the device listens on all
// addresses (a UDP connect sends nothing).
func (d *Device) flowTo(dst netip.AddrPort) (wire.Flow, error) {
	if !dst.IsValid() || dst.Port() == 0 {
		return wire.Flow{}, invalidf("destination %v is not an address with a port", dst)
	}
	dst = netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
	src := d.local.Addr().Unmap()
	if !src.IsUnspecified() {
		if src.Is4() != dst.Addr().Is4() {
			return wire.Flow{}, invalidf("destination %v: this device has address family of %v", dst, d.local)
		}
		return wire.Flow{Src: netip.AddrPortFrom(src, d.local.Port()), Dst: dst}, nil
	}
	src, err := RouteSource(dst.Addr())
	if err != nil {
		return wire.Flow{}, err
	}
	return wire.Flow{Src: netip.AddrPortFrom(src, d.local.Port()), Dst: dst}, nil
}

// rxLoop receives batches, hands every packet to its QP, then sends the
// ACKs and responses the batch produced in one batch. It holds the
// receive turn but while a CQ waiter receives for itself (receiveTurn).
func (d *Device) rxLoop() {
	defer d.wg.Done()
	t := &d.turn
	rb := &rxBatch{out: d.getBatch()}
	defer d.putBatch(rb.out)
	handing := false
	deliver := func(n int) bool {
		d.handleBatch(t.batch(n), rb)
		handing = d.handOver()
		d.settle(rb, handing)
		return !handing
	}
	for {
		err := d.recvInto(t.buffers(), deliver)
		if err == nil {
			if handing {
				handing = false
				d.releaseTurn(rb)
				if !d.awaitTurn(rb) {
					return
				}
			}
			d.sendDueAcks(rb)
			continue
		}
		if d.isClosed() || errors.Is(err, net.ErrClosed) {
			return
		}
		d.stats.rxErrors.Add(1)
		if errors.Is(err, ErrProviderFailed) {
			d.fail(err)
			return
		}
	}
}

// yieldGate lets the receive goroutine yield to the goroutines a batch
// woke when they would run next, and not when others are queued: a yield
// puts the receive goroutine behind every runnable goroutine (Gosched
// queues it globally). In a ping-pong the woken goroutine is alone and
// back within microseconds with its reply; under load every stream of the
// device would wait for the others to run before its next packet is
// read (eight concurrent HTTP/1.1 connections: p99 4.5 ms, against 1.5-2
// ms without yielding and TCP's 2). Owned by the receive turn's holder.
type yieldGate struct {
	runnable []metrics.Sample
}

// fewRunnable is how many runnable goroutines still let the receive
// goroutine yield: the one its batch woke, and one more.
const fewRunnable = 2

func (g *yieldGate) yield() {
	if g.open() {
		runtime.Gosched()
	}
}

// open reports whether few enough goroutines are runnable to yield.
func (g *yieldGate) open() bool {
	if g.runnable == nil {
		g.runnable = []metrics.Sample{{Name: "/sched/goroutines/runnable:goroutines"}}
	}
	metrics.Read(g.runnable) // about 150 ns, whatever the number of goroutines
	v := g.runnable[0].Value
	return v.Kind() != metrics.KindUint64 || v.Uint64() <= fewRunnable
}

// fail ends a device whose provider can never receive again: every QP
// goes to the error state (flushing its work requests), and the owner
// hears of it as EventDeviceFatal, with the reason in Err. Close still
// releases the rest.
func (d *Device) fail(err error) {
	d.failQPs()
	d.events.push(AsyncEvent{Type: EventDeviceFatal, Err: err})
}

// failQPs moves every QP to the error state, flushing its work requests;
// their last ACKs leave together.
func (d *Device) failQPs() {
	b := d.getBatch()
	for _, qp := range d.qpTable.all() {
		qp.mu.Lock()
		qp.toErrorInto(b)
		qp.mu.Unlock()
	}
	d.transmit(b)
	d.putBatch(b)
}

// receive checks one packet and hands it to the QP it is for.
func (d *Device) receive(pkt *Packet, rb *rxBatch) {
	d.stats.rxPackets.Add(1)
	if d.pcap != nil {
		d.pcap.record(wire.Flow{Src: pkt.Addr, Dst: d.local}, pkt.Data)
	}
	var p wire.Packet
	if err := wire.Parse(&p, pkt.Data); err != nil {
		d.stats.rxMalformed.Add(1)
		return
	}
	if !pkeyMatches(p.BTH.PKey, wire.DefaultPKey) {
		d.stats.rxBadPKey.Add(1)
		return
	}
	if p.BTH.DestQP == GSIQPN {
		if d.checkICRC(pkt) {
			d.receiveGSI(&p, pkt.Addr)
		}
		return
	}
	qp := d.qpTable.load(p.BTH.DestQP)
	if qp == nil {
		d.stats.rxNoQP.Add(1)
		return
	}
	if qp.typ != RC && !d.checkICRC(pkt) { // an RC QP checks with its own Sealer
		return
	}
	qp.receive(&p, pkt.Data, pkt.Addr, rb)
}

// pkeyMatches is IBA's partition check (9.6.1.1.3): the keys, less their
// membership bit, are equal and not invalid (0), and at least one of the
// two is a full member. Every QP here is in the port's one partition, the
// default full-membership 0xFFFF, as rxe's are.
func pkeyMatches(pkt, port uint16) bool {
	const member = 0x8000
	key := pkt &^ member
	return key != 0 && key == port&^member && (pkt|port)&member != 0
}

// checkICRC checks a packet for UD or QP1 and counts a bad one. The ICRC
// covers headers rebuilt from the addresses (see wire.Flow), and an IPv4
// ID the provider does not show, solved for (wire.Flow.CheckUnknownID):
// a UD peer may be any RoCEv2 sender. A device listening on all
// addresses does not learn which of its addresses a datagram was sent
// to, so for UD it cannot check; the UDP checksum, which every vRoCE
// sender sets, guards the payload.
func (d *Device) checkICRC(pkt *Packet) bool {
	if d.local.Addr().IsUnspecified() {
		return true
	}
	if _, ok := (wire.Flow{Src: pkt.Addr, Dst: d.local}).CheckUnknownID(pkt.Data); ok {
		return true
	}
	d.stats.rxBadICRC.Add(1)
	return false
}

func (d *Device) getBatch() *txBatch  { return d.batches.Get().(*txBatch) }
func (d *Device) putBatch(b *txBatch) { b.reset(); d.batches.Put(b) }

// recvInto receives into pkts and hands deliver each batch: batch after
// batch while deliver asks for more from a BatchReceiver, one from any
// other provider. The provider is asked once, at Open, which it is: an
// interface assertion per receive showed in a ping-pong's profile.
func (d *Device) recvInto(pkts []Packet, deliver func(n int) bool) error {
	if d.batch != nil {
		return d.batch.RecvEach(pkts, deliver)
	}
	got, err := d.prov.Recv(pkts)
	if err == nil && got > 0 {
		deliver(got)
	}
	return err
}

// transmit sends what b holds.
func (d *Device) transmit(b *txBatch) {
	if len(b.pkts) == 0 {
		return
	}
	d.transmitAt(b, d.now())
}

// transmitAt is transmit for a caller that has just read the clock (now),
// which dates the send for sendStall: a reading costs 44 ns on a first
// Zen, a fiftieth of one end's turn of a 64-byte ping-pong.
func (d *Device) transmitAt(b *txBatch, now int64) {
	if len(b.pkts) == 0 {
		return
	}
	b.joinLone()
	if d.pcap != nil {
		var whole []byte
		for i := range b.pkts {
			whole = b.pkts[i].AppendTo(whole[:0])
			d.pcap.record(b.flows[i], whole)
		}
	}
	d.stats.txPackets.Add(uint64(len(b.pkts)))
	d.sending.begin(now)
	if err := d.prov.Send(b.pkts); err != nil {
		d.stats.txErrors.Add(1)
	}
	d.sending.end(now)
	b.reset()
}

// EventType is the kind of an asynchronous event (ibv_event_type).
type EventType uint8

// Asynchronous events.
const (
	EventCQErr EventType = iota
	EventQPFatal
	EventQPReqErr
	EventQPAccessErr
	EventCommEst
	EventSQDrained
	EventQPLastWQEReached
	EventSRQLimitReached
	EventDeviceFatal
)

var eventNames = [...]string{"CQ error", "QP fatal", "QP request error", "QP access error", "communication established", "SQ drained", "last WQE reached", "SRQ limit reached", "device fatal"}

func (t EventType) String() string {
	if int(t) < len(eventNames) {
		return eventNames[t]
	}
	return fmt.Sprintf("EventType(%d)", uint8(t))
}

// AsyncEvent is an asynchronous event; the field for its object is set.
type AsyncEvent struct {
	Type EventType
	QP   *QP
	CQ   *CQ
	SRQ  *SRQ
	Err  error // EventDeviceFatal: what failed
}

const maxQueuedEvents = 1 << 16

type eventQueue struct {
	mu      sync.Mutex
	q       []AsyncEvent
	ready   chan struct{} // holds a token while q is not empty
	closed  bool
	dropped atomic.Uint64
}

func (e *eventQueue) init() { e.ready = make(chan struct{}, 1) }

func (e *eventQueue) push(ev AsyncEvent) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return
	}
	if len(e.q) >= maxQueuedEvents {
		e.dropped.Add(1)
		return
	}
	if ev.QP != nil {
		ev.QP.queuedEvents++
	}
	e.q = append(e.q, ev)
	select {
	case e.ready <- struct{}{}:
	default:
	}
}

// drop removes the untaken events about an object being destroyed (a
// QP, CQ or SRQ; about says which events are): its owner no longer looks
// for them, and each kept the object's memory. rsock reads no events, and
// every stream's QP on its SRQ queued EventQPLastWQEReached as it went to
// ERR, so a daemon serving `Connection: close` load grew by 2-3 KB a
// connection, up to the queue's 65,536 entries (a client could grow a
// server by connecting). A QP, destroyed by the thousand, counts its
// events, and one without any costs no scan.
func (e *eventQueue) drop(qp *QP, about func(AsyncEvent) bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if qp != nil && qp.queuedEvents == 0 || len(e.q) == 0 {
		return
	}
	kept := e.q[:0]
	for _, ev := range e.q {
		switch {
		case !about(ev):
			kept = append(kept, ev)
		case ev.QP != nil:
			ev.QP.queuedEvents--
		}
	}
	clear(e.q[len(kept):])
	e.q = kept
}

func (e *eventQueue) close() {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	select {
	case e.ready <- struct{}{}:
	default:
	}
}

// AsyncEvent waits for the next asynchronous event (ibv_get_async_event).
func (d *Device) AsyncEvent(ctx context.Context) (AsyncEvent, error) {
	e := &d.events
	for {
		e.mu.Lock()
		if len(e.q) > 0 {
			ev := e.q[0]
			e.q[0] = AsyncEvent{} // the array would keep its QP alive
			e.q = e.q[1:]
			if ev.QP != nil {
				ev.QP.queuedEvents--
			}
			if len(e.q) > 0 {
				select {
				case e.ready <- struct{}{}:
				default:
				}
			}
			e.mu.Unlock()
			return ev, nil
		}
		closed := e.closed
		e.mu.Unlock()
		if closed {
			return AsyncEvent{}, ErrClosed
		}
		select {
		case <-e.ready:
		case <-ctx.Done():
			return AsyncEvent{}, ctx.Err()
		}
	}
}
