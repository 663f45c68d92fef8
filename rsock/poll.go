package rsock

import (
	"context"
	"errors"
	"fmt"

	"vroce.dev/vroce"
	"vroce.dev/vroce/cm"
)

// A stack's completions: polled by its goroutine or handed over by the
// device's receive turn, and dispatched to their streams in order.

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
	if recvs > 0 && s.srq.Len() < s.target/4 && s.target < s.maxTarget {
		// Arrivals outran the top-up: the next burst would meet an
		// empty SRQ and draw RNR NAKs.
		s.target = min(2*s.target, s.maxTarget)
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
