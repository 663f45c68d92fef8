package rsock

import (
	"context"
	"time"
)

// Keepalive: idle streams probe their peer, so a dead one shows as a
// failed send.

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

// keepaliveCheck probes an idle stream; it returns the stream's period
// (0: no keepalive).
func (s *stream) keepaliveCheck(now time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.keepAlive <= 0 || s.state == stateReleased || s.state.hasFailed() {
		return 0
	}
	s.seen.update(s.rxCount, s.txCount, now)
	if now.Sub(s.seen.rxAt) >= s.keepAlive && now.Sub(s.seen.txAt) >= s.keepAlive/2 {
		s.controlLocked(kindKeepalive)
	}
	return s.keepAlive
}

// activity is what the keepalive check last saw of a stream's message
// counts, and when it saw each change: the last message in a direction
// was no later than that, and no earlier than the check before.
type activity struct {
	rx, tx     uint64
	rxAt, txAt time.Time
}

func (a *activity) update(rx, tx uint64, now time.Time) {
	if rx != a.rx {
		a.rx, a.rxAt = rx, now
	}
	if tx != a.tx {
		a.tx, a.txAt = tx, now
	}
}
