package fifo

// Queue is a FIFO queue; its zero value is empty and ready.
type Queue[T any] struct {
	q    []T
	head int
}

// Len is the number of queued elements.
func (f *Queue[T]) Len() int { return len(f.q) - f.head }

// Push queues v last.
func (f *Queue[T]) Push(v T) {
	if f.head > 0 && len(f.q) == cap(f.q) {
		n := copy(f.q, f.q[f.head:])
		clear(f.q[n:])
		f.q, f.head = f.q[:n], 0
	}
	f.q = append(f.q, v)
}

// Front is the oldest element; the queue must not be empty.
func (f *Queue[T]) Front() *T { return &f.q[f.head] }

// Pop removes and returns the oldest element; the queue must not be
// empty.
func (f *Queue[T]) Pop() T {
	v := f.q[f.head]
	var zero T
	f.q[f.head] = zero
	f.head++
	if f.head == len(f.q) {
		f.q, f.head = f.q[:0], 0
	}
	return v
}

// All is the queued elements, oldest first, to visit in place.
func (f *Queue[T]) All() []T { return f.q[f.head:] }

// RemoveFunc removes the elements drop reports true for, keeping the
// others in order.
func (f *Queue[T]) RemoveFunc(drop func(T) bool) {
	kept := f.q[:f.head]
	for _, v := range f.q[f.head:] {
		if !drop(v) {
			kept = append(kept, v)
		}
	}
	clear(f.q[len(kept):])
	f.q = kept
	if f.head == len(f.q) {
		f.q, f.head = f.q[:0], 0
	}
}

// Reset empties the queue and lets its array go.
func (f *Queue[T]) Reset() { f.q, f.head = nil, 0 }
