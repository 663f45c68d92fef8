package cm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"vroce.dev/internal/clock"
	"vroce.dev/internal/minheap"
	"vroce.dev/internal/rtt"
	"vroce.dev/internal/secrand"
	"vroce.dev/vroce"
)

// DefaultMaxBacklog is max_backlog's default, as in rdma_ucm.
const DefaultMaxBacklog = 1024

// Config configures a Manager.
type Config struct {
	// MaxBacklog caps every listener's queue of connection requests not
	// yet accepted (rdma_ucm's max_backlog); 0 means 1,024. 65,536 suits
	// 262,144 QPs connecting at once.
	MaxBacklog int
	// ResponseTimeout is the least a REQ, REP or DREQ waits for its answer
	// before it is sent again; the wait grows with the answer times seen,
	// and doubles with each try, up to two seconds. 0 means 100 ms (TCP
	// waits a second for a SYN, rdma_cm four).
	ResponseTimeout time.Duration
	// MaxRetries is how many times a message is sent again before the
	// peer counts as gone; 0 means 15, as in rdma_cm.
	MaxRetries int
	// OnEvent, if set, hears of every step of every connection. It runs
	// on the goroutine that took the step and must not block.
	OnEvent func(Event)
}

// EventType is a step in a connection's life, as rdma_cm reports them.
type EventType uint8

// Connection events.
const (
	EventConnectRequest EventType = iota // a request joined a listener's backlog
	EventEstablished                     // both ends: the connection is up
	EventRejected                        // active end: the peer said no
	EventUnreachable                     // active end: no answer after every retry
	EventConnectError                    // passive end: the accepted connection never completed
	EventDisconnected                    // either end: the connection is down
)

var eventNames = [...]string{"connect request", "established", "rejected", "unreachable", "connect error", "disconnected"}

func (t EventType) String() string {
	if int(t) < len(eventNames) {
		return eventNames[t]
	}
	return fmt.Sprintf("EventType(%d)", uint8(t))
}

// Event is one step of one connection.
type Event struct {
	Type   EventType
	ID     *ID
	Reason RejectReason // EventRejected
}

// Errors a caller can test with errors.Is.
var (
	ErrUnreachable = errors.New("cm: peer unreachable: no answer to the connection request")
	ErrClosed      = errors.New("cm: connection manager closed")
	// ErrWithdrawn: the peer gave up on its request before it was
	// accepted or rejected.
	ErrWithdrawn = errors.New("cm: the peer withdrew its connection request")
)

// RejectError is the peer's refusal of a connection. It matches
// syscall.ECONNREFUSED under errors.Is, as rsocket reports it.
type RejectError struct {
	Reason      RejectReason
	PrivateData []byte
}

func (e *RejectError) Error() string { return "cm: connection rejected: " + e.Reason.String() }

// Is makes a rejection an ECONNREFUSED.
func (e *RejectError) Is(target error) bool { return target == syscall.ECONNREFUSED }

// Stats counts a manager's messages and what became of them.
type Stats struct {
	Sent, Received MessageCounts
	Retransmits    uint64 // REQs, REPs and DREQs sent again
	BacklogDrops   uint64 // requests dropped on a full backlog
	Malformed      uint64 // MADs that are not CM messages
	Unexpected     uint64 // messages for no connection, or from the wrong peer, or in the wrong state
	Connections    int    // IDs alive now
}

// MessageCounts counts CM messages by type.
type MessageCounts struct{ REQ, MRA, REJ, REP, RTU, DREQ, DREP, SIDRReq, SIDRRep uint64 }

// Manager is the connection manager of one device: it owns the device's
// QP1, listens for services, and connects, accepts, rejects and
// disconnects RC QPs, with REQ/REP/RTU/REJ/MRA/DREQ/DREP on the wire,
// retransmitted on loss. One goroutine runs its timers; the device's
// receive goroutine runs its message handling.
type Manager struct {
	dev *vroce.Device
	gsi *vroce.GSI
	// gsiSet is closed once gsi is: a MAD can arrive, and be answered,
	// before OpenGSI has returned it.
	gsiSet   chan struct{}
	cfg      Config
	guid     uint64
	epoch    clock.Epoch
	wake     chan struct{}
	done     chan struct{}
	wg       sync.WaitGroup
	sent     [9]atomic.Uint64
	received [9]atomic.Uint64
	counts   struct{ retransmits, backlogDrops, malformed, unexpected atomic.Uint64 }

	mu        sync.Mutex // guards everything below, and every ID's state
	closed    bool
	ids       map[uint32]*ID    // by our communication ID
	remote    map[remoteKey]*ID // passive IDs by the peer's, to spot repeated REQs
	listeners map[uint64]*Listener
	timers    minheap.Heap[*ID] // by deadline (timerOrder)
	answers   rtt.Estimator     // how long the peers take to answer
	// Passive connections recently ended, by the peer's ID, so that a late
	// copy of their REQ cannot raise them again (the IBA's TimeWait).
	timeWait      map[remoteKey]int64
	timeWaitQueue []timeWaitEntry        // in expiry order
	sidrWaits     map[uint32]sidrWait    // Probe and ResolveUD calls waiting, by request ID
	udListeners   map[uint64]*UDListener // UD services, by service ID
	drained       chan struct{}          // closed when the last connection goes, for Drain
	// probers holds when each host last probed a service that listens
	// here (ProbedRecently), at most maxProbers hosts.
	probers     map[netip.Addr]int64
	proberSweep int64 // when probers was last swept of the stale
}

// A host that probed a listening service is remembered for proberMemory,
// and at most maxProbers hosts are: once full, hosts older than
// proberMemory are swept out, and a new host that still finds no room is
// not recorded (it is treated as if it had not probed).
const (
	proberMemory = 10 * time.Second
	maxProbers   = 4096
)

// timeWaitPeriod outlasts any copy of a REQ still in the network.
const timeWaitPeriod = 2 * time.Second

type timeWaitEntry struct {
	key remoteKey
	at  int64
}

type remoteKey struct {
	peer netip.AddrPort
	id   uint32
}

// New starts the connection manager of dev, claiming its QP1.
func New(dev *vroce.Device, cfg Config) (*Manager, error) {
	if cfg.MaxBacklog < 0 || cfg.ResponseTimeout < 0 || cfg.MaxRetries < 0 {
		return nil, fmt.Errorf("cm: negative setting in %+v", cfg)
	}
	if cfg.MaxBacklog == 0 {
		cfg.MaxBacklog = DefaultMaxBacklog
	}
	if cfg.ResponseTimeout == 0 {
		cfg.ResponseTimeout = 100 * time.Millisecond
	}
	if cfg.MaxRetries == 0 {
		cfg.MaxRetries = 15
	}
	m := &Manager{
		dev: dev, cfg: cfg, guid: secrand.Uint64(), epoch: clock.NewEpoch(),
		wake: make(chan struct{}, 1), done: make(chan struct{}), timers: timerOrder(),
		ids: map[uint32]*ID{}, remote: map[remoteKey]*ID{}, listeners: map[uint64]*Listener{},
		timeWait: map[remoteKey]int64{}, sidrWaits: map[uint32]sidrWait{}, udListeners: map[uint64]*UDListener{}, probers: map[netip.Addr]int64{},
		gsiSet: make(chan struct{}),
	}
	gsi, err := dev.OpenGSI(m.receive)
	if err != nil {
		return nil, fmt.Errorf("cm: %w", err)
	}
	m.gsi = gsi
	close(m.gsiSet)
	m.wg.Add(1)
	go m.timerLoop()
	return m, nil
}

// Stats returns the manager's counters.
func (m *Manager) Stats() Stats {
	load := func(c *[9]atomic.Uint64) MessageCounts {
		return MessageCounts{c[0].Load(), c[1].Load(), c[2].Load(), c[3].Load(), c[4].Load(), c[5].Load(), c[6].Load(), c[7].Load(), c[8].Load()}
	}
	m.mu.Lock()
	n := len(m.ids)
	m.mu.Unlock()
	return Stats{
		Sent: load(&m.sent), Received: load(&m.received),
		Retransmits: m.counts.retransmits.Load(), BacklogDrops: m.counts.backlogDrops.Load(),
		Malformed: m.counts.malformed.Load(), Unexpected: m.counts.unexpected.Load(),
		Connections: n,
	}
}

// Close disconnects every connection (one DREQ each, their QPs moved to
// ERR), rejects every request still in a backlog, fails connects in
// progress with ErrClosed, and releases QP1. QPs stay the caller's.
func (m *Manager) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	var o outbox
	for _, id := range m.ids {
		switch id.state {
		case stEstablished, stRepSent:
			o.send(id.peer, id.message(attrDREQ))
			o.fail(id.qp)
			o.wake(id)
		case stReqRcvd:
			o.send(id.peer, id.reject(RejectNoResources, msgREQ, nil))
		case stReqSent, stRepRcvd:
			id.err = ErrClosed
			o.wake(id)
		}
		id.state = stGone
	}
	clear(m.ids)
	clear(m.remote)
	for _, l := range m.listeners {
		l.closed = true
		l.queue = nil
		l.signal()
	}
	clear(m.listeners)
	m.mu.Unlock()
	o.carryOut(m)
	close(m.done)
	m.wg.Wait()
	return m.gsi.Close()
}

func (m *Manager) now() int64 { return m.epoch.Now() }

// newCommID returns an unused random communication ID: unguessable, so a
// stranger cannot aim messages at a connection.
func (m *Manager) newCommID() uint32 {
	for {
		v := uint32(secrand.Uint64())
		if _, taken := m.ids[v]; v != 0 && !taken {
			return v
		}
	}
}

func (m *Manager) remove(id *ID) {
	delete(m.ids, id.local)
	if !id.active {
		key := remoteKey{id.peer, id.remote}
		delete(m.remote, key)
		at := m.now() + int64(timeWaitPeriod)
		m.timeWait[key] = at
		m.timeWaitQueue = append(m.timeWaitQueue, timeWaitEntry{key, at})
		if len(m.timeWaitQueue) == 1 {
			// The timer loop may be asleep with nothing to wait for.
			select {
			case m.wake <- struct{}{}:
			default:
			}
		}
	}
	if id.listener != nil && id.queued {
		id.listener.pending--
		id.queued = false
	}
	id.state = stGone
	m.stopTimer(id)
	id.out = nil
	if len(m.ids) == 0 && m.drained != nil {
		close(m.drained)
		m.drained = nil
	}
}

// Drain waits until the manager holds no connection (every disconnect
// answered or given up on), or ctx ends: a process closing its last
// connections calls it before Close, which would cut their DREQs short.
func (m *Manager) Drain(ctx context.Context) error {
	m.mu.Lock()
	if len(m.ids) == 0 || m.closed {
		m.mu.Unlock()
		return nil
	}
	if m.drained == nil {
		m.drained = make(chan struct{})
	}
	c := m.drained
	m.mu.Unlock()
	select {
	case <-c:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// arm schedules id's retransmission for its current try.
func (m *Manager) arm(id *ID, after time.Duration) {
	at := m.now() + int64(after)
	if m.timers.Len() == 0 || at < m.timers.Min().deadline {
		select {
		case m.wake <- struct{}{}:
		default:
		}
	}
	id.deadline = at
	if id.hidx > 0 {
		m.timers.Fix(int(id.hidx - 1))
	} else {
		m.timers.Push(id)
	}
}

// stopTimer cancels id's retransmission: the heap holds only live timers,
// so an ended connection is not kept alive by one.
func (m *Manager) stopTimer(id *ID) {
	if id.hidx > 0 {
		m.timers.Remove(int(id.hidx - 1))
	}
}

// maxResponseWait caps the wait for an answer, however slow the peer.
const maxResponseWait = 2 * time.Second

// backoff is the wait before try n (0-based): the response timeout
// learnt from answers so far, doubled per try, and spread by a quarter
// either way, so that requests dropped together by a full backlog do not
// all come back together and meet it full again.
func (m *Manager) backoff(n uint8) time.Duration {
	rto := m.cfg.ResponseTimeout
	if learnt := time.Duration(m.answers.Timeout(0)); learnt > 0 {
		rto = min(max(rto, learnt), maxResponseWait)
	}
	wait := min(rto<<n, maxResponseWait)
	return wait*3/4 + mrand.N(wait/2+1)
}

// start sends the opening message of an exchange (REQ, REP or DREQ) and
// arms its retransmission.
func (m *Manager) start(id *ID, o *outbox) {
	id.retries = 0
	id.sentAt = m.now()
	o.sendRaw(id.peer, id.out)
	m.arm(id, m.backoff(0))
}

// answered learns from an exchange's answer how long the peer takes to
// respond: the network, and the peer's backlog and load. As in TCP (Karn),
// only an exchange sent once says which copy was answered.
func (m *Manager) answered(id *ID) {
	if id.retries != 0 {
		return
	}
	m.answers.Sample(m.now() - id.sentAt)
}

func (m *Manager) timerLoop() {
	defer m.wg.Done()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		var o outbox
		m.mu.Lock()
		now := m.now()
		for m.timers.Len() > 0 && m.timers.Min().deadline <= now {
			m.expire(m.timers.Pop(), &o)
		}
		for len(m.timeWaitQueue) > 0 && m.timeWaitQueue[0].at <= now {
			e := m.timeWaitQueue[0]
			if m.timeWait[e.key] == e.at {
				delete(m.timeWait, e.key)
			}
			m.timeWaitQueue = m.timeWaitQueue[1:]
		}
		if len(m.timeWaitQueue) == 0 {
			m.timeWaitQueue = nil
		}
		wait := time.Hour
		if m.timers.Len() > 0 {
			wait = time.Duration(m.timers.Min().deadline - now)
		}
		if len(m.timeWaitQueue) > 0 {
			wait = min(wait, time.Duration(m.timeWaitQueue[0].at-now))
		}
		m.mu.Unlock()
		o.carryOut(m)
		t.Reset(wait)
		select {
		case <-t.C:
		case <-m.wake:
		case <-m.done:
			return
		}
	}
}

// expire handles a retransmission deadline that passed unanswered.
func (m *Manager) expire(id *ID, o *outbox) {
	if int(id.retries) < m.cfg.MaxRetries && id.out != nil {
		id.retries++
		m.counts.retransmits.Add(1)
		o.sendRaw(id.peer, id.out)
		m.arm(id, m.backoff(id.retries))
		return
	}
	switch id.state {
	case stReqSent:
		m.remove(id)
		id.err = fmt.Errorf("%w: %v after %d tries", ErrUnreachable, id.peer, id.retries+1)
		o.wake(id)
		o.event(Event{Type: EventUnreachable, ID: id})
	case stRepSent:
		m.remove(id)
		o.send(id.peer, id.reject(RejectTimeout, msgREP, nil))
		o.fail(id.qp)
		o.event(Event{Type: EventConnectError, ID: id})
		o.wake(id)
	case stDreqSent:
		m.remove(id)
		o.event(Event{Type: EventDisconnected, ID: id})
	}
}

// outbox collects what a step must do once the manager's lock is
// released: sends, QP failures and events.
type outbox struct {
	msgs   []outMsg
	fails  []*vroce.QP
	events []Event
	wakes  []chan struct{} // active connects to wake, last: their events come first
}

type outMsg struct {
	to netip.AddrPort
	b  *[vroce.MADSize]byte
}

func (o *outbox) send(to netip.AddrPort, msg *mad) {
	b := new([vroce.MADSize]byte)
	msg.marshal(b)
	o.sendRaw(to, b)
}

func (o *outbox) sendRaw(to netip.AddrPort, b *[vroce.MADSize]byte) {
	o.msgs = append(o.msgs, outMsg{to, b})
}

func (o *outbox) fail(qp *vroce.QP) {
	if qp != nil {
		o.fails = append(o.fails, qp)
	}
}

func (o *outbox) event(e Event) { o.events = append(o.events, e) }

// wake takes the channel under the manager's lock: the ID may drop it
// once awake.
func (o *outbox) wake(id *ID) {
	if id.wake != nil {
		o.wakes = append(o.wakes, id.wake)
	}
}

func (o *outbox) carryOut(m *Manager) {
	// QPs fail first: an ACK one owes leaves as it does (vroce), ahead
	// of the DREQ or DREP that ends the connection.
	for _, qp := range o.fails {
		qp.Modify(&vroce.QPAttr{State: vroce.QPSErr}, vroce.QPAttrState)
	}
	for _, msg := range o.msgs {
		if a := attrID(binary.BigEndian.Uint16(msg.b[16:])); a >= attrREQ && a <= attrSIDRRep {
			m.sent[a-attrREQ].Add(1)
		}
		m.gsi.Send(msg.to, msg.b[:]) // a lost message is retried or answered again
	}
	if m.cfg.OnEvent != nil {
		for _, e := range o.events {
			m.cfg.OnEvent(e)
		}
	}
	for _, c := range o.wakes {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

// timerOrder orders the IDs waiting for an answer by deadline; each
// knows its place (hidx, one-based; 0 outside the heap) so that an
// answer removes it at once.
func timerOrder() minheap.Heap[*ID] {
	return minheap.New(func(a, b *ID) bool { return a.deadline < b.deadline }, func(id *ID, i int) { id.hidx = int32(i + 1) })
}

// serviceID is the rdma_cm service ID of a port in the TCP port space.
func serviceID(port uint16) uint64 { return psTCP<<16 | uint64(port) }

// checkContext fails early on a context already done.
func checkContext(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("cm: %w", err)
	}
	return nil
}
