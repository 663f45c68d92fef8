package rsock

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"vroce.dev/vroce"
	"vroce.dev/vroce/cm"
)

// stack is a device with its shared stream machinery: PD, one CQ for
// every stream's completions, the SRQ, the connection manager, and one
// goroutine that polls the CQ. Its streams and listener hold references;
// the last one to go closes it.
type stack struct {
	dev      *vroce.Device
	pd       *vroce.PD
	cq       *vroce.CQ
	srq      *vroce.SRQ
	cm       *cm.Manager
	recent   recentServices // CM services reached lately (recent.go)
	probes   probeFlights   // SOCKET dials' service probes in flight (probeflight.go)
	onIdle   func()         // called once the last reference is gone
	cfg      stackConfig    // what opened it
	released chan struct{}  // closed when the device is
	// inlineMax is the largest write sent inline, with no buffer of its
	// own and no completion (stream.sendInlineLocked): the device's
	// limit for inline data, set at open.
	inlineMax int

	mu        sync.Mutex // guards everything below
	streams   map[uint32]*stream
	refs      int
	closed    bool
	free      []*buffer // of bufSize: receives and large sends
	freeSmall []*buffer // of smallBufSize: small sends
	rx        []*buffer // posted receives, by WR ID
	rxFree    []uint32
	target    int // receives to keep posted
	maxTarget int // what target may grow to: maxPosted (a test lowers it)
	posted    int
	downs     []*stream // disconnect notices for the poller
	// keepalivePeriods counts the streams by keepalive period, for the
	// keepalive loop's pace; keepaliveKick (one slot) tells the loop of
	// a shorter one (keepalive.go).
	keepalivePeriods map[time.Duration]int
	keepaliveKick    chan struct{}

	// pollMu is held by whoever polls the CQ and dispatches (the stack's
	// goroutine or the device's receive goroutine), so that a stream's
	// completions are handled in order; wcs is its holder's.
	pollMu sync.Mutex
	wcs    []vroce.WorkCompletion

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// stackConfig says how to open a stack's device.
type stackConfig struct {
	provider string
	options  any
	addr     string
	backlog  int // the manager's max_backlog
}

func openStack(c stackConfig) (*stack, error) {
	awaitRelease(c.addr)
	dev, err := vroce.Open(vroce.Config{Provider: c.provider, Addr: c.addr, ProviderOptions: c.options})
	if err != nil {
		return nil, err
	}
	s := &stack{dev: dev, streams: map[uint32]*stream{}, keepalivePeriods: map[time.Duration]int{}, keepaliveKick: make(chan struct{}, 1), target: minPosted, maxTarget: maxPosted, wcs: make([]vroce.WorkCompletion, 64),
		cfg: c, released: make(chan struct{}), recent: newRecentServices(), inlineMax: dev.Attr().MaxInline}
	fail := func(err error) (*stack, error) { dev.Close(); close(s.released); return nil, err }
	if s.pd, err = dev.AllocPD(); err != nil {
		return fail(err)
	}
	if s.cq, err = dev.CreateCQ(vroce.SpecMaxCQE); err != nil { // grows as used
		return fail(err)
	}
	if s.srq, err = s.pd.CreateSRQ(vroce.SRQAttr{MaxWR: maxPosted, MaxSGE: 1}); err != nil {
		return fail(err)
	}
	if s.cm, err = cm.New(dev, cm.Config{MaxBacklog: c.backlog, OnEvent: s.onCMEvent}); err != nil {
		return fail(err)
	}
	s.mu.Lock()
	err = s.replenishLocked()
	s.mu.Unlock()
	if err != nil {
		s.cm.Close()
		return fail(err)
	}
	s.cq.OnCompletion(s.onCompletions)
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	liveStacks.Add(1)
	if fixedPort(c.addr) {
		byAddr.Lock()
		if byAddr.m == nil {
			byAddr.m = map[string]*stack{}
		}
		byAddr.m[c.addr] = s
		byAddr.Unlock()
	}
	s.wg.Add(2)
	go s.poll(ctx)
	go s.keepalive(ctx)
	return s, nil
}

// ref takes a reference; it fails once the stack has closed.
func (s *stack) ref() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.refs++
	return true
}

// unref drops a reference; the last one closes the stack. The poller
// closes the device on its way out; a caller on any other goroutine waits
// for that, the poller itself (a stream torn down by a completion) cannot.
func (s *stack) unref(onPoller bool) {
	s.mu.Lock()
	s.refs--
	last := s.refs == 0 && !s.closed
	if last {
		s.closed = true
	}
	s.mu.Unlock()
	if !last {
		return
	}
	if s.onIdle != nil {
		s.onIdle()
	}
	s.cancel()
	if !onPoller {
		s.wg.Wait()
	}
}

// shutdown releases the device; the poller runs it as it exits. If the
// last streams' DREQs still wait for answers, the device stays open for
// them (two seconds at most) in the background: Close never blocks.
func (s *stack) shutdown() {
	if s.cm.Stats().Connections == 0 {
		s.release()
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		s.cm.Drain(ctx)
		cancel()
		s.release()
	}()
}

func (s *stack) release() {
	s.cm.Close()
	s.dev.Close()
	byAddr.Lock()
	if byAddr.m[s.cfg.addr] == s {
		delete(byAddr.m, s.cfg.addr)
	}
	byAddr.Unlock()
	close(s.released)
	if liveStacks.Add(-1) == 0 {
		drain.mu.Lock()
		for _, c := range drain.waiters {
			close(c)
		}
		drain.waiters = nil
		drain.mu.Unlock()
	}
}

// byAddr holds the stacks whose device is open on a fixed port, by the
// address it was opened on (a port the system picks cannot collide).
var byAddr struct {
	sync.Mutex
	m map[string]*stack
}

// maxLinger bounds how long a new stack waits for a closing one on its
// address: the two seconds shutdown gives the last DREQs, and some.
const maxLinger = 3 * time.Second

// awaitRelease waits, up to maxLinger, for a stack that is closing on
// addr (a fixed port) to release its device: a program that closes its
// listener and listens again on the port at once (iperf3 does between
// tests) would otherwise find the UDP port still taken by the last
// streams' goodbyes. A stack still in use is not waited for.
func awaitRelease(addr string) {
	if !fixedPort(addr) {
		return
	}
	byAddr.Lock()
	old := byAddr.m[addr]
	byAddr.Unlock()
	if old == nil {
		return
	}
	old.mu.Lock()
	closing := old.closed
	old.mu.Unlock()
	if !closing {
		return
	}
	select {
	case <-old.released:
	case <-time.After(maxLinger):
	}
}

// fixedPort says addr names its port: not 0, not left out.
func fixedPort(addr string) bool {
	_, port, err := net.SplitHostPort(addr)
	return err == nil && port != "0" && port != ""
}

var drain struct {
	mu      sync.Mutex
	waiters []chan struct{}
}

// Drain waits until every stream and listener this process closed has
// finished closing in the background (its FIN or DREQ answered, its
// device released), or ctx ends. A program about to exit calls it after
// closing its connections, so that its peers see them end cleanly; a
// listener or connection still open keeps Drain waiting. A stream that
// ended in order keeps its QP a few retransmission timeouts, 40 to
// 500 ms (timeWaitFor), so that is the least Drain waits after one.
func Drain(ctx context.Context) error {
	if err := waitExchangeClosers(ctx); err != nil {
		return err
	}
	drain.mu.Lock()
	if liveStacks.Load() == 0 {
		drain.mu.Unlock()
		return nil
	}
	c := make(chan struct{})
	drain.waiters = append(drain.waiters, c)
	drain.mu.Unlock()
	select {
	case <-c:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// waitExchangeClosers waits for the dialers' exchange connections to
// close (closeAfterListener), or ctx to end.
func waitExchangeClosers(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		exchangeClosers.Wait() // at most listenerCloseWait
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// liveStacks counts the stacks whose device is open: streams close in
// the background, and tests wait for this to reach zero.
var liveStacks atomic.Int64

// failAll ends every stream with err.
func (s *stack) failAll(err error) {
	for _, st := range s.snapshot() {
		st.fail(err, true)
	}
}

// snapshot lists the streams, to visit without the stack's lock.
func (s *stack) snapshot() []*stream {
	s.mu.Lock()
	defer s.mu.Unlock()
	all := make([]*stream, 0, len(s.streams))
	for _, st := range s.streams {
		all = append(all, st)
	}
	return all
}

func (s *stack) add(st *stream) {
	s.mu.Lock()
	s.streams[st.qp.QPN()] = st
	s.keepaliveAddLocked(st)
	s.mu.Unlock()
}

func (s *stack) remove(st *stream) {
	s.mu.Lock()
	if s.streams[st.qp.QPN()] == st {
		delete(s.streams, st.qp.QPN())
		s.keepaliveRemoveLocked(st)
	}
	excess := s.trimIdleSmallLocked()
	s.mu.Unlock()
	for _, b := range excess {
		b.mr.Dereg()
	}
}

// qpAttr is every stream QP's shape: receives from the SRQ, a send queue
// deep enough for a window of data and the control messages beside it.
func qpAttr(s *stack) vroce.QPInitAttr {
	return vroce.QPInitAttr{Type: vroce.RC, SendCQ: s.cq, RecvCQ: s.cq, SRQ: s.srq,
		Cap: vroce.QPCap{MaxSendWR: 4 * window, MaxSendSGE: 1, MaxInlineData: s.inlineMax}}
}
