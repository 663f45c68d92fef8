package rsock

// fifo is a queue that keeps its array: when the last element leaves, the
// queue starts again at the front, so a steady exchange of messages
// allocates nothing. (Reslicing from the front, as a plain slice queue
// does, loses capacity with every pop and allocates again once empty.)
type fifo[T any] struct {
	q    []T
	head int
}

func (f *fifo[T]) len() int { return len(f.q) - f.head }

func (f *fifo[T]) push(v T) {
	if f.head > 0 && len(f.q) == cap(f.q) {
		n := copy(f.q, f.q[f.head:])
		clear(f.q[n:])
		f.q, f.head = f.q[:n], 0
	}
	f.q = append(f.q, v)
}

// front is the oldest element; the queue must not be empty.
func (f *fifo[T]) front() *T { return &f.q[f.head] }

// pop removes and returns the oldest element; the queue must not be empty.
func (f *fifo[T]) pop() T {
	v := f.q[f.head]
	var zero T
	f.q[f.head] = zero
	f.head++
	if f.head == len(f.q) {
		f.q, f.head = f.q[:0], 0
	}
	return v
}

// all is the queued elements, oldest first, to visit in place.
func (f *fifo[T]) all() []T { return f.q[f.head:] }

// reset empties the queue and lets its array go (a finished stream keeps
// nothing).
func (f *fifo[T]) reset() { f.q, f.head = nil, 0 }
