package rsock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"vroce.dev/vroce"
	"vroce.dev/vroce/cm"
)

// The receive side of every stream of a device is shared: one SRQ holds
// buffers of bufSize bytes, kept topped up by the device's poller, and a
// stream may have at most the credits it granted its peer worth of them
// filled and unread. Small messages are copied out at once, so an
// unread request costs its size, not a buffer.
const (
	bufSize = 64 << 10
	// window is the credits a stream grants: messages in flight towards
	// it, at most 1 MiB of buffers a slow reader holds. With 8, a
	// loopback stream of 64 KiB writes waited for credits (1,575 against
	// 1,932 MiB/s in 5 interleaved runs); 32 gained nothing more.
	window    = 16
	minPosted = 32
	maxPosted = 1024
	smallCopy = 2 << 10
	// maxIdleBufs bounds the buffers a stack keeps free for reuse.
	maxIdleBufs = 256
	// smallBufSize is the send buffer of a write that fits one and can
	// leave at once. With a 64 KiB buffer held per message in flight, a
	// thousand request/response streams through one proxy outran
	// maxIdleBufs and allocated and registered a buffer per request
	// (perf: page clearing and GC, 8% of the proxy's CPU).
	smallBufSize     = 4 << 10
	maxIdleSmallBufs = 4096
)

// buffer is registered memory for one message.
type buffer struct {
	mr   *vroce.MR
	data []byte
	n    int          // bytes in use
	sgl  [1]vroce.SGE // for posting without allocating
}

func (b *buffer) sge(n int) []vroce.SGE {
	b.sgl[0] = b.mr.SGE(0, n)
	return b.sgl[:]
}

// stack is a device with its shared stream machinery: PD, one CQ for
// every stream's completions, the SRQ, the connection manager, and one
// goroutine that polls the CQ. Its streams and listener hold references;
// the last one to go closes it.
type stack struct {
	dev    *vroce.Device
	pd     *vroce.PD
	cq     *vroce.CQ
	srq    *vroce.SRQ
	cm     *cm.Manager
	onIdle func() // called once the last reference is gone

	mu        sync.Mutex // guards everything below
	streams   map[uint32]*stream
	refs      int
	closed    bool
	free      []*buffer // of bufSize: receives and large sends
	freeSmall []*buffer // of smallBufSize: small sends
	rx        []*buffer // posted receives, by WR ID
	rxFree    []uint32
	target    int // receives to keep posted
	posted    int
	downs     []*stream // disconnect notices for the poller

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
	dev, err := vroce.Open(vroce.Config{Provider: c.provider, Addr: c.addr, ProviderOptions: c.options})
	if err != nil {
		return nil, err
	}
	s := &stack{dev: dev, streams: map[uint32]*stream{}, target: minPosted, wcs: make([]vroce.WorkCompletion, 64)}
	fail := func(err error) (*stack, error) { dev.Close(); return nil, err }
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
	if liveStacks.Add(-1) == 0 {
		drain.mu.Lock()
		for _, c := range drain.waiters {
			close(c)
		}
		drain.waiters = nil
		drain.mu.Unlock()
	}
}

var drain struct {
	mu      sync.Mutex
	waiters []chan struct{}
}

// Drain waits until every stream and listener this process closed has
// finished closing in the background (its FIN or DREQ answered, its
// device released), or ctx ends. A program about to exit calls it after
// closing its connections, so that its peers see them end cleanly; a
// listener or connection still open keeps Drain waiting.
func Drain(ctx context.Context) error {
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

// liveStacks counts the stacks whose device is open: streams close in
// the background, and tests wait for this to reach zero.
var liveStacks atomic.Int64

// failAll ends every stream with err.
func (s *stack) failAll(err error) {
	for _, st := range s.snapshot() {
		st.fail(err, true)
	}
}

// keepalive sends a probe on every stream idle for its keepalive period,
// checking a few times per period. A dead peer then shows as the probe's
// failed send.
func (s *stack) keepalive(ctx context.Context) {
	defer s.wg.Done()
	t := time.NewTimer(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		next := time.Second
		for _, st := range s.snapshot() {
			if p := st.keepaliveCheck(now); p > 0 {
				next = min(next, max(p/4, 5*time.Millisecond))
			}
		}
		t.Reset(next)
	}
}

// getBuf returns a free registered buffer.
func (s *stack) getBuf() (*buffer, error) { return s.takeBuf(&s.free, bufSize) }

// getSmallBuf returns a send buffer of smallBufSize bytes.
func (s *stack) getSmallBuf() (*buffer, error) { return s.takeBuf(&s.freeSmall, smallBufSize) }

func (s *stack) takeBuf(free *[]*buffer, size int) (*buffer, error) {
	s.mu.Lock()
	if n := len(*free); n > 0 {
		b := (*free)[n-1]
		*free = (*free)[:n-1]
		s.mu.Unlock()
		return b, nil
	}
	s.mu.Unlock()
	return s.newBuf(size)
}

// newBuf registers a fresh buffer of size bytes.
func (s *stack) newBuf(size int) (*buffer, error) {
	data := make([]byte, size)
	mr, err := s.pd.RegMR(data, vroce.AccessLocalWrite)
	if err != nil {
		return nil, fmt.Errorf("rsock: buffer: %w", err)
	}
	return &buffer{mr: mr, data: data}, nil
}

// putBuf keeps b for reuse, in the list of its size, or deregisters it.
func (s *stack) putBuf(b *buffer) {
	b.n = 0
	s.mu.Lock()
	free, limit := &s.free, maxIdleBufs
	if len(b.data) == smallBufSize {
		free, limit = &s.freeSmall, maxIdleSmallBufs
	}
	if len(*free) < limit {
		*free = append(*free, b)
		b = nil
	}
	s.mu.Unlock()
	if b != nil {
		b.mr.Dereg()
	}
}

// replenishLocked posts receives until target are outstanding.
func (s *stack) replenishLocked() error {
	for s.posted < s.target {
		var b *buffer
		if n := len(s.free); n > 0 {
			b, s.free = s.free[n-1], s.free[:n-1]
		} else {
			var err error
			if b, err = s.newBuf(bufSize); err != nil {
				return err
			}
		}
		var slot uint32
		if n := len(s.rxFree); n > 0 {
			slot, s.rxFree = s.rxFree[n-1], s.rxFree[:n-1]
			s.rx[slot] = b
		} else {
			slot = uint32(len(s.rx))
			s.rx = append(s.rx, b)
		}
		if err := s.srq.PostRecv(vroce.RecvWR{ID: uint64(slot), SGL: b.sge(bufSize)}); err != nil {
			s.rx[slot] = nil
			s.rxFree = append(s.rxFree, slot)
			s.free = append(s.free, b)
			return fmt.Errorf("rsock: post receive: %w", err)
		}
		s.posted++
	}
	return nil
}

// takeRx returns the buffer of a completed receive.
func (s *stack) takeRx(id uint64) *buffer {
	if id >= uint64(len(s.rx)) {
		return nil
	}
	b := s.rx[id]
	s.rx[id] = nil
	s.rxFree = append(s.rxFree, uint32(id))
	s.posted--
	return b
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
	s.mu.Unlock()
}

func (s *stack) remove(st *stream) {
	s.mu.Lock()
	if s.streams[st.qp.QPN()] == st {
		delete(s.streams, st.qp.QPN())
	}
	s.mu.Unlock()
}

// poll is the stack's goroutine. Completions that arrive in a receive
// batch are dispatched on the device's receive goroutine (onCompletions);
// this goroutine takes the rest (a flush's, a timer's), the disconnect
// notices, and the CQ's failure.
func (s *stack) poll(ctx context.Context) {
	defer s.wg.Done()
	defer s.shutdown()
	for {
		s.pollMu.Lock()
		// The notices first, the completions next, then the notices
		// handled: every completion that came before a notice (the FIN
		// and the data before the peer's DREQ) reaches its stream first,
		// so that an orderly end is not taken for a reset.
		s.mu.Lock()
		downs := s.downs
		s.downs = nil
		s.mu.Unlock()
		n, err := s.drainLocked()
		if err == nil {
			for _, st := range downs {
				st.onDisconnect()
			}
		}
		s.pollMu.Unlock()
		if err == nil && n == 0 && len(downs) == 0 {
			// A notice that comes while we wait wakes the CQ (Wake),
			// and one that came since we looked makes Wait return.
			err = s.cq.Wait(ctx)
		}
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, vroce.ErrClosed) {
				// Overflow: completions were lost, so no stream's state
				// can be trusted. (The CQ is deeper than every stream's
				// work could fill; this is a safety net.)
				s.failAll(fmt.Errorf("rsock: completion queue: %w", err))
			}
			return
		}
	}
}

// onCompletions is the CQ's completion handler (vroce.CQ.OnCompletion):
// the device's receive goroutine hands what it just received to the
// streams itself, so that data reaches a reader without a hand-off
// through the stack's goroutine.
func (s *stack) onCompletions() {
	s.pollMu.Lock()
	_, err := s.drainLocked()
	s.pollMu.Unlock()
	if err != nil {
		s.cq.Wake() // the stack's goroutine deals with it
	}
}

// drainLocked polls the CQ until it is empty and hands every completion
// to its stream, under pollMu (which keeps each stream's completions in
// order); it returns how many it took.
func (s *stack) drainLocked() (int, error) {
	total := 0
	for {
		n, err := s.cq.Poll(s.wcs)
		if err != nil || n == 0 {
			return total, err
		}
		s.dispatch(s.wcs[:n])
		total += n
		if n < len(s.wcs) {
			return total, nil
		}
	}
}

// dispatch hands completions to their streams and keeps the SRQ topped
// up.
func (s *stack) dispatch(wcs []vroce.WorkCompletion) {
	recvs := 0
	for i := range wcs {
		wc := &wcs[i]
		s.mu.Lock()
		st := s.streams[wc.QPN]
		var b *buffer
		if wc.Opcode == vroce.WCRecv {
			b = s.takeRx(wc.ID)
			recvs++
		}
		s.mu.Unlock()
		switch {
		case b != nil && (st == nil || wc.Status != vroce.WCSuccess):
			if st != nil {
				st.onError(wc.Status)
			}
			s.putBuf(b)
		case b != nil:
			st.onRecv(b, wc)
		case st != nil:
			st.onSendDone(wc.Status)
		}
	}
	s.mu.Lock()
	if recvs > 0 && s.srq.Len() < s.target/4 && s.target < maxPosted {
		// Arrivals outran the top-up: the next burst would meet an
		// empty SRQ and draw RNR NAKs.
		s.target = min(2*s.target, maxPosted)
	}
	s.replenishLocked() // a failure leaves fewer posted; RNR covers it
	s.mu.Unlock()
}

// onCMEvent hears of RDMA_CM disconnects (on the device's receive
// goroutine): the peer's QP is gone and ours is in ERR, which a stream
// with nothing to send would never see. The poller tells the stream.
func (s *stack) onCMEvent(e cm.Event) {
	if e.Type != cm.EventDisconnected || e.ID.QP() == nil {
		return
	}
	s.mu.Lock()
	if st := s.streams[e.ID.QP().QPN()]; st != nil {
		s.downs = append(s.downs, st)
		s.cq.Wake() // the poller attends to it once the CQ is empty
	}
	s.mu.Unlock()
}

// qpAttr is every stream QP's shape: receives from the SRQ, a send queue
// deep enough for a window of data and the control messages beside it.
func qpAttr(s *stack) vroce.QPInitAttr {
	return vroce.QPInitAttr{Type: vroce.RC, SendCQ: s.cq, RecvCQ: s.cq, SRQ: s.srq,
		Cap: vroce.QPCap{MaxSendWR: 4 * window, MaxSendSGE: 1}}
}
