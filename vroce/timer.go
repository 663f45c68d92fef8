package vroce

import (
	"container/heap"
	"sync"
	"time"
)

// timerQueue holds, for each QP with a deadline, the earliest time it must
// be looked at. Moving a deadline later costs nothing: the QP keeps its
// entry and re-arms when the stale entry fires. So the per-packet cost of
// the retransmission timer is one store, not a heap operation.
type timerQueue struct {
	mu   sync.Mutex
	h    timerHeap
	wake chan struct{}
}

type timerEntry struct {
	at int64
	qp *QP
}

type timerHeap []timerEntry

func (h timerHeap) Len() int           { return len(h) }
func (h timerHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h timerHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *timerHeap) Push(x any)        { *h = append(*h, x.(timerEntry)) }
func (h *timerHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// schedule makes sure the timer goroutine looks at qp no later than at.
func (d *Device) schedule(qp *QP, at int64) {
	t := &d.timers
	t.mu.Lock()
	if qp.timerAt != 0 && qp.timerAt <= at {
		t.mu.Unlock()
		return
	}
	qp.timerAt = at
	heap.Push(&t.h, timerEntry{at: at, qp: qp})
	first := t.h[0].qp == qp && t.h[0].at == at
	t.mu.Unlock()
	if first {
		select {
		case t.wake <- struct{}{}:
		default:
		}
	}
}

func (d *Device) timerLoop() {
	defer d.wg.Done()
	t := &d.timers
	clock := time.NewTimer(time.Hour)
	defer clock.Stop()
	var due []*QP
	for {
		now := d.now()
		next := int64(-1)
		t.mu.Lock()
		for len(t.h) > 0 {
			e := t.h[0]
			if e.at > now {
				next = e.at
				break
			}
			heap.Pop(&t.h)
			if e.qp.timerAt == e.at { // not superseded by an earlier entry
				e.qp.timerAt = 0
				due = append(due, e.qp)
			}
		}
		t.mu.Unlock()
		for i, qp := range due {
			qp.onTimer(now)
			due[i] = nil
		}
		due = due[:0]
		wait := time.Hour
		if next >= 0 {
			wait = time.Duration(next - now)
		}
		clock.Reset(wait)
		select {
		case <-clock.C:
		case <-t.wake:
		case <-d.done:
			return
		}
	}
}
