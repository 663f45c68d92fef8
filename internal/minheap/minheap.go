package minheap

// Heap is a min-heap of T in the order less gives. An element that must
// be found again (to move or remove it) learns its place through moved,
// which may be nil. The zero Heap is not usable: make one with New.
type Heap[T any] struct {
	items []T
	less  func(a, b T) bool
	// moved, if set, is told each element's index whenever it changes,
	// and -1 when it leaves the heap.
	moved func(x T, i int)
}

// New returns an empty heap ordered by less, telling moved (if not nil)
// where each element stands.
func New[T any](less func(a, b T) bool, moved func(x T, i int)) Heap[T] {
	return Heap[T]{less: less, moved: moved}
}

// Len is how many elements the heap holds.
func (h *Heap[T]) Len() int { return len(h.items) }

// Min is the smallest element; the heap must not be empty.
func (h *Heap[T]) Min() T { return h.items[0] }

// Push adds x.
func (h *Heap[T]) Push(x T) {
	h.items = append(h.items, x)
	i := len(h.items) - 1
	h.place(i)
	h.up(i)
}

// Pop removes and returns the smallest element; the heap must not be
// empty.
func (h *Heap[T]) Pop() T { return h.Remove(0) }

// Remove removes and returns the element at index i.
func (h *Heap[T]) Remove(i int) T {
	x := h.items[i]
	last := len(h.items) - 1
	if i != last {
		h.items[i] = h.items[last]
		h.place(i)
	}
	var zero T
	h.items[last] = zero // let go of what it refers to
	h.items = h.items[:last]
	if last == 0 {
		h.items = nil // let a burst's array go
	}
	if i < last {
		h.Fix(i)
	}
	if h.moved != nil {
		h.moved(x, -1)
	}
	return x
}

// Fix restores the order after the element at index i changed.
func (h *Heap[T]) Fix(i int) {
	if !h.down(i) {
		h.up(i)
	}
}

func (h *Heap[T]) up(i int) {
	for i > 0 {
		parent := (i - 1) / 2
		if !h.less(h.items[i], h.items[parent]) {
			return
		}
		h.swap(i, parent)
		i = parent
	}
}

// down sinks the element at i and reports whether it moved.
func (h *Heap[T]) down(i int) bool {
	start := i
	for {
		small, l, r := i, 2*i+1, 2*i+2
		if l < len(h.items) && h.less(h.items[l], h.items[small]) {
			small = l
		}
		if r < len(h.items) && h.less(h.items[r], h.items[small]) {
			small = r
		}
		if small == i {
			return i != start
		}
		h.swap(i, small)
		i = small
	}
}

func (h *Heap[T]) swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	h.place(i)
	h.place(j)
}

func (h *Heap[T]) place(i int) {
	if h.moved != nil {
		h.moved(h.items[i], i)
	}
}
