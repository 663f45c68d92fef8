package ttlmap

import (
	"sync"
	"time"
)

// Map keeps values by key for TTL after each Put, at most Max of them.
// Set TTL and Max before first use (SetTTL later). Safe for concurrent
// use.
type Map[K comparable, V any] struct {
	TTL time.Duration
	Max int

	mu sync.Mutex
	m  map[K]entry[V]
}

type entry[V any] struct {
	v  V
	at time.Time
}

// Get returns k's value if it was put less than TTL before now.
func (m *Map[K, V]) Get(k K, now time.Time) (V, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.m[k]
	if !ok || now.Sub(e.at) >= m.TTL {
		var none V
		return none, false
	}
	return e.v, true
}

// Put keeps v for k as of now. A new key when Max are kept first makes
// room by dropping the expired ones; if none has expired, it is not kept
// (the caller asks again next time).
func (m *Map[K, V]) Put(k K, v V, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.m == nil {
		m.m = make(map[K]entry[V])
	}
	if _, ok := m.m[k]; !ok && len(m.m) >= m.Max {
		for old, e := range m.m {
			if now.Sub(e.at) >= m.TTL {
				delete(m.m, old)
			}
		}
		if len(m.m) >= m.Max {
			return
		}
	}
	m.m[k] = entry[V]{v: v, at: now}
}

// Delete forgets k.
func (m *Map[K, V]) Delete(k K) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.m, k)
}

// Len is how many entries are kept, expired or not.
func (m *Map[K, V]) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.m)
}

// SetTTL changes how long entries count, for every Get from now on.
func (m *Map[K, V]) SetTTL(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.TTL = d
}
