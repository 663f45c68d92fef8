package fifo

import (
	"slices"
	"testing"
)

func TestQueueKeepsOrderAndItsArray(t *testing.T) {
	var q Queue[int]
	for i := range 4 {
		q.Push(i)
	}
	if got := q.Pop(); got != 0 || *q.Front() != 1 || q.Len() != 3 {
		t.Fatalf("pop %d, front %d, len %d", got, *q.Front(), q.Len())
	}
	q.RemoveFunc(func(v int) bool { return v == 2 })
	if !slices.Equal(q.All(), []int{1, 3}) {
		t.Fatalf("after removing 2: %v", q.All())
	}
	q.Pop()
	q.Pop()
	if q.Len() != 0 || q.head != 0 || cap(q.q) == 0 {
		t.Fatalf("an emptied queue restarts at the front of its array: head %d, cap %d", q.head, cap(q.q))
	}
	allocs := testing.AllocsPerRun(100, func() {
		q.Push(1)
		q.Push(2)
		q.Pop()
		q.Pop()
	})
	if allocs != 0 {
		t.Fatalf("a steady exchange allocates %.1f times", allocs)
	}
	q.Push(7)
	q.RemoveFunc(func(int) bool { return true })
	if q.Len() != 0 || q.head != 0 {
		t.Fatalf("removing everything left len %d head %d", q.Len(), q.head)
	}
}
