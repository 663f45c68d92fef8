package rsock

import (
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"vroce.dev/internal/fifo"
	"vroce.dev/netconn"
	"vroce.dev/vroce"
	"vroce.dev/vroce/cm"
)

// ErrCreditViolation ends a stream whose peer sent a data message beyond
// the credits this end granted: each would hold a buffer of the shared
// SRQ that no reader freed (a peer granted 16 sent 768 x 64 KiB, and the
// server buffered 48 MiB). It is an EPROTO under errors.Is.
var ErrCreditViolation = fmt.Errorf("rsock: the peer sent more data than it was granted credits for: %w", syscall.EPROTO)

// Stats are the rsock counters of this process.
type Stats struct {
	CreditViolations uint64 // streams reset: the peer sent beyond its credits
}

var creditViolations atomic.Uint64

// ReadStats returns the rsock counters of this process.
func ReadStats() Stats { return Stats{CreditViolations: creditViolations.Load()} }

// Close behaviour.
const (
	// lingerTimeout bounds how long a closed stream waits for its data
	// and FIN to be acknowledged and for the peer's FIN, before it resets.
	lingerTimeout = 10 * time.Second
	// resetTimeout bounds the wait for an RST to leave.
	resetTimeout = time.Second
	// A stream finished in order keeps its QP a while (timeWaitFor).
	timeWaitRTOs = 4
	minTimeWait  = 40 * time.Millisecond
	maxTimeWait  = 500 * time.Millisecond
)

// timeWaitFor is how long a stream finished in order keeps its QP, as
// TCP's TIME_WAIT: to acknowledge the peer's FIN again should our ACK be
// lost, or the peer would send it until its retry_cnt ran out. The peer
// sends it again after a tail-loss probe, then after its retransmission
// timeout and twice that: four of our RTOs (the path's, so about the
// peer's) cover those three, and at least 40 ms covers them for a peer
// that never measured the path (one that only received: vroce starts
// it at a 10 ms RTO), at most 500 ms. Unlike TCP's, it is waited out by
// a program about to exit (Drain): a fixed 500 ms held every such
// program's exit that long.
func timeWaitFor(rto time.Duration) time.Duration {
	return min(max(timeWaitRTOs*rto, minTimeWait), maxTimeWait)
}

// chunk is one received message not yet read: in a held SRQ buffer, or
// copied out when small.
type chunk struct {
	data  []byte
	buf   *buffer // nil when copied
	small *[]byte // the pooled copy, when copied
}

// smallBufs holds the copies of small messages, so that receiving one
// allocates nothing.
var smallBufs = sync.Pool{New: func() any { b := make([]byte, smallCopy); return &b }}

// release gives a consumed chunk's memory back.
func (c *chunk) release(st *stack) {
	if c.buf != nil {
		st.putBuf(c.buf)
	}
	if c.small != nil {
		smallBufs.Put(c.small)
	}
	*c = chunk{}
}

// sent is a message posted and not yet completed, in posting order (an
// RC QP completes sends in order).
type sent struct {
	buf  *buffer // nil for control messages
	kind int
}

// stream is one connection: an RC QP and both halves of its state. It
// implements netconn.Stream.
type stream struct {
	st        *stack
	qp        *vroce.QP
	id        *cm.ID // RDMA_CM connections disconnect on teardown
	peerBuf   int    // the largest message the peer takes
	keepAlive time.Duration

	mu sync.Mutex
	// Receiving.
	rq   fifo.Queue[chunk]
	owed int // credits earned by reading, not yet granted back
	// allowed is what the peer may still send: our window and every
	// grant posted, less the data messages received. The receive side
	// enforces it (ErrCreditViolation).
	allowed int
	// Sending.
	credits  int     // data messages the peer will take
	pending  *buffer // bytes written and not yet sent
	inflight fifo.Queue[sent]
	// finPosted: our FIN's SEND is posted (state.owesFIN says when it
	// is due: once the data written before it is out).
	finPosted bool
	// Keepalive: messages received and sent, counted rather than timed
	// (a clock read per message is a tenth of a microsecond), and when
	// the keepalive check last saw each count change.
	rxCount, txCount uint64
	seen             activity
	// bytesIn and bytesOut count what the application has read and
	// written, for Info.
	bytesIn, bytesOut uint64
	// Lifecycle: the connection's state (streamstate.go), why it failed,
	// and whether the application still holds the stream.
	state  streamState
	err    error // why the stream failed (reset, timeout), once state.hasFailed
	closed bool  // the application closed the stream
	linger int   // -1: orderly close; 0: reset on close
	timer  *time.Timer
	// rwake wakes readers and wwake writers; one waiting on either may
	// receive for the device meanwhile, so that the packet it waits for
	// (data; a credit) wakes it directly.
	rwake, wwake *vroce.Signal
}

func newStream(st *stack, qp *vroce.QP, keepAlive time.Duration) *stream {
	return &stream{st: st, qp: qp, keepAlive: keepAlive, linger: -1, allowed: window,
		rwake: st.dev.NewSignal(), wwake: st.dev.NewSignal(), seen: activity{rxAt: time.Now()}}
}

// start sets what the peer said at connection time. Credits add up: a
// message granting more may already have come.
func (s *stream) start(peer streamHello) {
	s.mu.Lock()
	s.credits += peer.window
	s.peerBuf = min(peer.bufSize, bufSize)
	now := time.Now()
	s.seen = activity{rx: s.rxCount, tx: s.txCount, rxAt: now, txAt: now}
	s.mu.Unlock()
}

// Read implements netconn.Stream.
func (s *stream) Read(p []byte, cancel <-chan struct{}) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.awaitDataLocked(cancel); err != nil {
		return 0, err
	}
	n := s.readLocked(p)
	s.passOnLocked()
	return n, nil
}

// awaitDataLocked waits until data is queued to read, or returns why none
// will be: the stream closed or failed, the peer's FIN (io.EOF), cancel
// (netconn.ErrCanceled).
func (s *stream) awaitDataLocked(cancel <-chan struct{}) error {
	for {
		switch {
		case s.closed:
			return net.ErrClosed
		case s.rq.Len() > 0:
			return nil
		case s.state.hasFailed():
			s.rwake.Notify()
			return s.err
		case s.state.peerFinished():
			s.rwake.Notify()
			return io.EOF
		}
		s.mu.Unlock()
		s.rwake.Wait(cancel)
		s.mu.Lock()
		select {
		case <-cancel:
			return netconn.ErrCanceled
		default:
		}
	}
}

var _ netconn.ReadInterrupter = (*stream)(nil)

// InterruptRead implements netconn.ReadInterrupter: a reader receiving
// for the device sees its deadline pass at once.
func (s *stream) InterruptRead() { s.rwake.Notify() }

var _ netconn.WriteInterrupter = (*stream)(nil)

// InterruptWrite implements netconn.WriteInterrupter, as InterruptRead
// does for a writer waiting for credits.
func (s *stream) InterruptWrite() { s.wwake.Notify() }

// readLocked copies queued data into p, releasing what is consumed and
// granting its credits back.
func (s *stream) readLocked(p []byte) int {
	n := 0
	for n < len(p) && s.rq.Len() > 0 {
		c := s.rq.Front()
		k := copy(p[n:], c.data)
		n += k
		c.data = c.data[k:]
		if len(c.data) > 0 {
			break
		}
		s.consumedLocked(c)
		s.rq.Pop()
	}
	s.grantDueLocked()
	s.bytesIn += uint64(n)
	return n
}

// consumedLocked releases a chunk the application has read, earning its
// credit back.
func (s *stream) consumedLocked(c *chunk) {
	c.release(s.st)
	s.owed++
}

// grantDueLocked grants the credits earned once they are half a window.
func (s *stream) grantDueLocked() {
	if s.owed >= window/2 {
		s.grantLocked()
	}
}

// passOnLocked wakes another reader when a read left something for it:
// data, the peer's FIN or a failure.
func (s *stream) passOnLocked() {
	if s.rq.Len() > 0 || s.state.peerFinished() || s.state.hasFailed() {
		s.rwake.Notify()
	}
}

// grantLocked gives owed credits back: on data about to leave if there
// is some, else in a credit message.
func (s *stream) grantLocked() {
	if !s.state.peerMaySend() || s.owed == 0 {
		return // after its FIN the peer sends nothing more to grant for
	}
	if s.pending != nil && s.pending.n > 0 && s.credits > 0 {
		s.sendPendingLocked()
		return
	}
	s.controlLocked(kindCredit)
}

// Write implements netconn.Stream.
func (s *stream) Write(p []byte, cancel <-chan struct{}) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writeLocked(p, cancel)
}

// writableLocked reports why nothing more can be written, if so.
func (s *stream) writableLocked() error {
	switch {
	case s.closed:
		return net.ErrClosed
	case s.state.hasFailed():
		return s.err
	case s.state.writeShut():
		return syscall.EPIPE
	}
	return nil
}

// writeLocked copies p into send buffers and sends them as credits allow,
// waiting for credits when the pending buffer is full.
func (s *stream) writeLocked(p []byte, cancel <-chan struct{}) (int, error) {
	n := 0
	for {
		if err := s.writableLocked(); err != nil || n == len(p) {
			return n, err
		}
		if s.pending == nil && len(p)-n <= s.st.inlineMax && s.credits > 0 {
			if s.sendInlineLocked(p[n:]) {
				s.bytesOut += uint64(len(p) - n)
				n = len(p)
			}
			continue
		}
		if s.pending == nil {
			// What leaves at once, and fits, takes a small buffer;
			// what waits for credits gathers in a large one.
			get := s.st.getBuf
			if len(p)-n <= smallBufSize && s.credits > 0 {
				get = s.st.getSmallBuf
			}
			b, err := get()
			if err != nil {
				return n, err
			}
			s.pending = b
		}
		if limit := s.pendingLimit(); s.pending.n < limit {
			k := copy(s.pending.data[s.pending.n:limit], p[n:])
			s.pending.n += k
			n += k
			s.bytesOut += uint64(k)
		}
		s.sendPendingLocked()
		if n == len(p) {
			continue
		}
		if s.pending != nil && s.pending.n == s.pendingLimit() {
			// Full, and no credit to send it: wait for the peer to read.
			if !s.awaitCreditLocked(cancel) {
				return n, netconn.ErrCanceled
			}
		}
	}
}

// pendingLimit is how much the pending buffer takes: the peer's largest
// message, or less when the buffer is small.
func (s *stream) pendingLimit() int { return min(s.peerBuf, len(s.pending.data)) }

// awaitCreditLocked waits, unlocked, for the stream's sending side to
// change (a credit, a failure); false if cancel closed first. Meanwhile
// the writer may receive for the device, as a reader does: a stream's
// sender is woken by the credit that frees it, not by the device's
// receive goroutine on another thread (between two processes over veth,
// that hand-off and the thread hopping it causes cost a 64 KiB stream
// a third of its goodput; see the README's performance notes).
func (s *stream) awaitCreditLocked(cancel <-chan struct{}) bool {
	s.mu.Unlock()
	s.wwake.Wait(cancel)
	s.mu.Lock()
	select {
	case <-cancel:
		return false
	default:
		return true
	}
}

// sendPendingLocked sends the pending data if the peer has a credit for it.
func (s *stream) sendPendingLocked() {
	b := s.pending
	if b == nil || b.n == 0 || s.credits == 0 || s.state.hasFailed() || s.state == stateReleased {
		return
	}
	if err := s.postLocked(kindData, vroce.SendWR{Flags: vroce.SendSignaled, SGL: b.sge(b.n)}); err != nil {
		s.failLocked(syscall.ECONNRESET)
		return
	}
	s.pending = nil
	s.inflight.Push(sent{buf: b, kind: kindData})
}

// sendInlineLocked sends p, a small write the peer has a credit for, at
// once: the engine copies it as it is posted (SendInline), so no buffer
// waits for its acknowledgement and it asks for no completion. The
// completion and the buffer it gave back (a CQ entry, the handler, the
// stack's lock and a map lookup, the buffer pool's lock twice) were
// about 0.45 us of a 55 us 64-byte round trip on one CPU. RC completes
// in order, so the next signalled send's completion, or our FIN's,
// covers it; a failure still completes every send, signalled or not.
func (s *stream) sendInlineLocked(p []byte) bool {
	if err := s.postLocked(kindData, vroce.SendWR{Flags: vroce.SendInline, Inline: p}); err != nil {
		s.failLocked(syscall.ECONNRESET)
		return false
	}
	return true
}

// controlLocked sends a control message, granting what is owed.
func (s *stream) controlLocked(kind int) bool {
	if s.state == stateReleased {
		return false
	}
	if err := s.postLocked(kind, vroce.SendWR{Flags: vroce.SendSignaled}); err != nil {
		return false // the send queue is full or the QP failed: a later call retries
	}
	s.inflight.Push(sent{kind: kind})
	return true
}

// postLocked posts wr as a message of kind, a SEND whose immediate data
// grants the peer the credits owed; data spends one of the peer's.
func (s *stream) postLocked(kind int, wr vroce.SendWR) error {
	wr.Opcode, wr.Imm = vroce.WRSendWithImm, immediate(kind, s.owed)
	if err := s.qp.PostSend(wr); err != nil {
		return err
	}
	if kind == kindData {
		s.credits--
	}
	s.allowed += s.owed
	s.owed = 0
	s.txCount++
	return nil
}

// advanceLocked moves the stream on after any change: sends what it
// can, the FIN once the data is out, and tears down what is finished.
// It reports whether the caller must finish the teardown.
func (s *stream) advanceLocked() bool {
	if s.state == stateReleased {
		return false
	}
	if !s.state.hasFailed() {
		s.sendPendingLocked()
		if s.credits > 0 && (s.pending == nil || s.pending.n < s.pendingLimit()) {
			s.wwake.Notify()
		}
		if s.state.owesFIN() && !s.finPosted && (s.pending == nil || s.pending.n == 0) && s.controlLocked(kindFIN) {
			s.finPosted = true
		}
	}
	// Once the application has let go: both ends done (whatever is
	// still in flight after our FIN, a credit or a keepalive, no longer
	// matters to anyone), the peer gone (our FIN's completion may never
	// come from a QP in ERR), or failed and our RST, if any, out.
	return s.closed && s.state.finished(s.inflight.Len())
}

// on moves the stream to the state ev leads to.
func (s *stream) on(ev streamEvent) { s.state = s.state.next(ev) }

// CloseWrite implements netconn.Stream.
func (s *stream) CloseWrite() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state.hasFailed() {
		return s.err
	}
	s.on(evShutWrite)
	s.advanceLocked()
	return nil
}

// setID records the RDMA_CM connection, disconnected at teardown.
func (s *stream) setID(id *cm.ID) {
	s.mu.Lock()
	s.id = id
	s.mu.Unlock()
}

// SetLinger chooses what Close does: a negative sec (the default) sends
// what is written and a FIN, in the background; zero resets the stream
// at once, discarding unsent data, and the peer sees ECONNRESET. A
// positive sec is the longest the background close may take before it
// resets (at most ten seconds here).
func (s *stream) SetLinger(sec int) {
	s.mu.Lock()
	s.linger = sec
	s.mu.Unlock()
}

// Close implements netconn.Stream. It never blocks: an orderly close
// finishes in the background, bounded by the linger time.
func (s *stream) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	unread := s.rq.Len() > 0
	rq := s.rq.All()
	for i := range rq {
		rq[i].release(s.st)
	}
	s.rq.Reset()
	s.rwake.Notify()
	s.wwake.Notify()
	wait := lingerTimeout
	switch {
	case s.state.hasFailed():
	case s.linger == 0 || unread:
		// Closing with data unread tells the peer it was not, as TCP
		// does: with a reset.
		s.resetLocked()
		wait = resetTimeout
	default:
		if s.linger > 0 {
			wait = min(wait, time.Duration(s.linger)*time.Second)
		}
		s.on(evShutWrite)
	}
	done := s.advanceLocked()
	if !done && s.state != stateReleased {
		s.timer = time.AfterFunc(wait, s.expire)
	}
	s.mu.Unlock()
	if done {
		s.teardown(false)
	}
	return nil
}

// resetLocked sends an RST and fails the stream.
func (s *stream) resetLocked() {
	s.failLocked(syscall.ECONNRESET)
	if s.pending != nil {
		s.st.putBuf(s.pending)
		s.pending = nil
	}
	if s.state != stateResetSent && s.controlLocked(kindRST) {
		s.on(evRstPosted)
	}
	s.rwake.Notify()
	s.wwake.Notify()
}

// expire ends a close that took too long.
func (s *stream) expire() {
	s.mu.Lock()
	if s.state == stateReleased {
		s.mu.Unlock()
		return
	}
	if !s.state.hasFailed() {
		s.resetLocked() // best effort: the QP may go before it leaves
	}
	s.mu.Unlock()
	s.teardown(false)
}

// fail ends the stream with err, from a completion (onPoller) or the stack.
func (s *stream) fail(err error, onPoller bool) {
	s.mu.Lock()
	s.failLocked(err)
	done := s.advanceLocked()
	s.mu.Unlock()
	if done {
		s.teardown(onPoller)
	}
}

func (s *stream) failLocked(err error) {
	if !s.state.hasFailed() && s.state != stateReleased {
		s.err = err
		s.on(evFailure)
	}
	s.rwake.Notify()
	s.wwake.Notify()
}

// onRecv takes a received message (the poller's goroutine).
func (s *stream) onRecv(b *buffer, wc *vroce.WorkCompletion) {
	s.mu.Lock()
	if gone := s.state == stateReleased; wc.Flags&vroce.WCWithImm == 0 || gone {
		s.mu.Unlock()
		s.st.putBuf(b)
		if !gone {
			s.fail(syscall.EPROTO, true)
		}
		return
	}
	s.rxCount++
	s.credits += int(wc.Imm & 0xffff)
	keep := false
	switch int(wc.Imm >> 28) {
	case kindData:
		s.allowed--
		switch {
		case s.allowed < 0:
			if !s.state.hasFailed() {
				creditViolations.Add(1) // streams, not messages
			}
			s.failLocked(ErrCreditViolation)
			s.resetLocked()
		case s.closed || s.state.peerFinished():
			// Data for a stream the application closed: as TCP, reset.
			s.resetLocked()
		case int(wc.ByteLen) <= smallCopy:
			small := smallBufs.Get().(*[]byte)
			n := copy(*small, b.data[:wc.ByteLen])
			s.rq.Push(chunk{data: (*small)[:n], small: small})
		default:
			s.rq.Push(chunk{data: b.data[:wc.ByteLen], buf: b})
			keep = true
		}
		s.rwake.Notify()
	case kindFIN:
		s.on(evPeerFIN)
		s.rwake.Notify()
	case kindRST:
		s.failLocked(syscall.ECONNRESET)
	}
	done := s.advanceLocked()
	s.mu.Unlock()
	if !keep {
		s.st.putBuf(b)
	}
	if done {
		s.teardown(true)
	}
}

// onSendDone takes a send completion (the poller's goroutine).
func (s *stream) onSendDone(status vroce.WCStatus) {
	s.mu.Lock()
	if s.inflight.Len() == 0 || s.state == stateReleased {
		s.mu.Unlock()
		return
	}
	m := s.inflight.Pop()
	if m.buf != nil {
		s.st.putBuf(m.buf)
	}
	switch {
	case status == vroce.WCSuccess:
	case status == vroce.WCRetryExcErr || status == vroce.WCRNRRetryExcErr:
		s.failLocked(syscall.ETIMEDOUT) // the peer stopped answering
	default:
		s.failLocked(syscall.ECONNRESET)
	}
	if m.kind == kindFIN {
		s.on(evFinAcked)
	}
	done := s.advanceLocked()
	s.mu.Unlock()
	if done {
		s.teardown(true)
	}
}

// onDisconnect: the RDMA_CM connection ended (the device's receive
// goroutine, which must not wait). After the peer's FIN that is the
// orderly end; before it, the peer is gone: a reset.
func (s *stream) onDisconnect() {
	s.mu.Lock()
	if !s.state.peerFinished() {
		s.failLocked(syscall.ECONNRESET)
	}
	s.on(evPeerLeft)
	done := s.advanceLocked()
	s.mu.Unlock()
	if done {
		s.teardown(true)
	}
}

// onError takes a failed receive.
func (s *stream) onError(status vroce.WCStatus) {
	if status != vroce.WCWRFlushErr {
		s.fail(syscall.ECONNRESET, true)
	}
}

// teardown releases the stream's QP and buffers once it is finished.
func (s *stream) teardown(onPoller bool) {
	s.mu.Lock()
	if s.state == stateReleased {
		s.mu.Unlock()
		return
	}
	orderly := s.state == stateTimeWait
	s.on(evTeardown)
	if s.timer != nil {
		s.timer.Stop()
	}
	rq := s.rq.All()
	for i := range rq {
		rq[i].release(s.st)
	}
	s.rq.Reset()
	for _, m := range s.inflight.All() {
		if m.buf != nil {
			s.st.putBuf(m.buf)
		}
	}
	s.inflight.Reset()
	if s.pending != nil {
		s.st.putBuf(s.pending)
		s.pending = nil
	}
	id := s.id
	s.mu.Unlock()
	s.st.remove(s)
	release := func(onPoller bool) {
		if id != nil {
			id.Disconnect()
		}
		s.qp.Destroy()
		s.st.unref(onPoller)
	}
	if orderly {
		// As TCP's TIME_WAIT: the QP stays a moment to acknowledge the
		// peer's FIN again should our ACK be lost, or the peer would
		// retry until its retry_cnt ran out.
		time.AfterFunc(timeWaitFor(s.qp.Stats().RTO), func() { release(false) })
		return
	}
	release(onPoller)
}
