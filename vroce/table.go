package vroce

import (
	"math/bits"
	"sync"
	"sync/atomic"
)

// table holds a device's QPs by QPN and MRs by key, and finds them for the
// data path, which looks one up for every packet and every SGE. A read is
// lock-free: an atomic load of the slot array, then of a slot or two (the
// names are random, so they spread evenly). sync.Map, used before, hashed
// an interface key per lookup: about a tenth of a small message's CPU on
// the receive side.
//
// Writers (create and destroy, register and deregister) take the mutex.
// The table is open-addressed with linear probing; a removed entry leaves
// a tombstone, so that a probe that passed it goes on, and a later insert
// may reuse it. A reader decides a slot is its name's by the name the
// object itself carries (key), which never changes, so a slot that is
// reused while it reads can only make it miss or hit correctly.
type table[T any] struct {
	key   func(*T) uint32
	tomb  *T // marks a removed entry
	mu    sync.Mutex
	slots atomic.Pointer[tableSlots[T]]
	live  int // entries held; under mu
	used  int // slots ever filled in the current array (live + tombstones); under mu
}

type tableSlots[T any] struct {
	s     []atomic.Pointer[T]
	shift uint // 32 - log2(len(s))
}

func newTable[T any](key func(*T) uint32) *table[T] {
	return &table[T]{key: key, tomb: new(T)}
}

// home is where the probe for k starts: Fibonacci hashing, whose top
// bits mix all of k's.
func (ts *tableSlots[T]) home(k uint32) int {
	return int((k * 0x9e3779b1) >> ts.shift)
}

// load is the object named k, or nil.
func (t *table[T]) load(k uint32) *T {
	ts := t.slots.Load()
	if ts == nil {
		return nil
	}
	mask := len(ts.s) - 1
	for i := ts.home(k); ; i = (i + 1) & mask {
		switch p := ts.s[i].Load(); {
		case p == nil:
			return nil // at most three quarters are ever used: a probe ends
		case p != t.tomb && t.key(p) == k:
			return p
		}
	}
}

// insert adds v under a name no entry holds: name writes a candidate into
// v (names are random) and reports whether it is one v may have; insert
// asks again until it has one that is also free.
func (t *table[T]) insert(v *T, name func() bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for !name() || t.load(t.key(v)) != nil {
	}
	ts := t.slots.Load()
	if ts == nil || 4*(t.used+1) > 3*len(ts.s) {
		ts = t.rebuildLocked(t.live + 1)
	}
	mask := len(ts.s) - 1
	for i := ts.home(t.key(v)); ; i = (i + 1) & mask {
		switch p := ts.s[i].Load(); p {
		case nil:
			t.used++
			fallthrough
		case t.tomb:
			ts.s[i].Store(v)
			t.live++
			return
		}
	}
}

// delete removes v and reports whether the table held it.
func (t *table[T]) delete(v *T) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	ts := t.slots.Load()
	if ts == nil {
		return false
	}
	mask := len(ts.s) - 1
	for i := ts.home(t.key(v)); ; i = (i + 1) & mask {
		switch p := ts.s[i].Load(); p {
		case nil:
			return false
		case v:
			ts.s[i].Store(t.tomb)
			t.live--
			return true
		}
	}
}

// all returns the entries, in no order.
func (t *table[T]) all() []*T {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]*T, 0, t.live)
	if ts := t.slots.Load(); ts != nil {
		for i := range ts.s {
			if p := ts.s[i].Load(); p != nil && p != t.tomb {
				out = append(out, p)
			}
		}
	}
	return out
}

// rebuildLocked moves the live entries to a fresh array at most half full
// with n entries, dropping the tombstones, and publishes it; readers still
// probing the old array see it as it was.
func (t *table[T]) rebuildLocked(n int) *tableSlots[T] {
	size := max(16, 1<<bits.Len(uint(2*n-1)))
	next := &tableSlots[T]{s: make([]atomic.Pointer[T], size), shift: uint(32 - bits.TrailingZeros(uint(size)))}
	mask := size - 1
	if old := t.slots.Load(); old != nil {
		for i := range old.s {
			p := old.s[i].Load()
			if p == nil || p == t.tomb {
				continue
			}
			j := next.home(t.key(p))
			for next.s[j].Load() != nil {
				j = (j + 1) & mask
			}
			next.s[j].Store(p)
		}
	}
	t.used = t.live
	t.slots.Store(next)
	return next
}
