package rsock

import (
	"context"
	"time"
)

// Keepalive: idle streams probe their peer, so a dead one shows as a
// failed send.

// keepalive sends a probe on every stream idle for its keepalive period,
// looking a few times per period: as often as the stack's shortest period
// needs (keepaliveEveryLocked), and never while no stream keeps alive, so
// that an idle program is not woken for nothing. A dead peer then shows
// as the probe's failed send.
func (s *stack) keepalive(ctx context.Context) {
	defer s.wg.Done()
	t := time.NewTimer(time.Hour)
	t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			now := time.Now()
			for _, st := range s.snapshot() {
				st.keepaliveCheck(now)
			}
		case <-s.keepaliveKick:
		}
		s.mu.Lock()
		every := s.keepaliveEveryLocked()
		s.mu.Unlock()
		if every > 0 {
			t.Reset(every)
		}
	}
}

// keepaliveEveryLocked is how often the keepalive loop looks at the
// stack's streams: a quarter of the shortest keepalive period among them
// (at least 5 ms), or 0 when none keeps alive.
func (s *stack) keepaliveEveryLocked() time.Duration {
	var every time.Duration
	for p := range s.keepalivePeriods {
		if every == 0 || p/4 < every {
			every = p / 4
		}
	}
	if every == 0 {
		return 0
	}
	return max(every, 5*time.Millisecond)
}

// keepaliveAddLocked counts st's keepalive period among the stack's, and
// tells the loop when it must now look sooner than it planned to.
func (s *stack) keepaliveAddLocked(st *stream) {
	if st.keepAlive <= 0 {
		return
	}
	before := s.keepaliveEveryLocked()
	s.keepalivePeriods[st.keepAlive]++
	if after := s.keepaliveEveryLocked(); before == 0 || after < before {
		select {
		case s.keepaliveKick <- struct{}{}:
		default: // a kick is already waiting
		}
	}
}

// keepaliveRemoveLocked takes st's period out of the count: the loop
// slows down or stops at its next look.
func (s *stack) keepaliveRemoveLocked(st *stream) {
	if st.keepAlive <= 0 {
		return
	}
	if s.keepalivePeriods[st.keepAlive]--; s.keepalivePeriods[st.keepAlive] <= 0 {
		delete(s.keepalivePeriods, st.keepAlive)
	}
}

// keepaliveCheck probes st if it has been idle for its period.
func (s *stream) keepaliveCheck(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.keepAlive <= 0 || s.state == stateReleased || s.state.hasFailed() {
		return
	}
	s.seen.update(s.rxCount, s.txCount, now)
	if now.Sub(s.seen.rxAt) >= s.keepAlive && now.Sub(s.seen.txAt) >= s.keepAlive/2 {
		s.controlLocked(kindKeepalive)
	}
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
