package minheap

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Elements come out in order, whatever order they went in, with pops
// between the pushes.
func TestPopsInOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	h := New(func(a, b int) bool { return a < b }, nil)
	var want []int
	for i := range 1000 {
		if i%3 == 2 && h.Len() > 0 {
			slices.Sort(want)
			require.Equal(t, want[0], h.Min())
			require.Equal(t, want[0], h.Pop())
			want = want[1:]
			continue
		}
		x := rng.IntN(500)
		want = append(want, x)
		h.Push(x)
	}
	slices.Sort(want)
	var out []int
	for h.Len() > 0 {
		out = append(out, h.Pop())
	}
	assert.Equal(t, want, out)
}

type item struct {
	key int
	idx int // where the heap keeps it; -1 outside
}

// Each element knows its place, so it can be moved or removed from the
// middle; one that leaves is told so.
func TestElementsKnowTheirPlace(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	h := New(func(a, b *item) bool { return a.key < b.key }, func(x *item, i int) { x.idx = i })
	items := make([]*item, 200)
	for i := range items {
		items[i] = &item{key: rng.IntN(1000)}
		h.Push(items[i])
	}
	check := func() {
		t.Helper()
		for i, x := range h.items {
			require.Equal(t, i, x.idx, "item %d's index", i)
		}
	}
	check()
	for _, x := range items[:50] { // move some
		x.key = rng.IntN(1000)
		h.Fix(x.idx)
	}
	check()
	for _, x := range items[50:100] { // remove some
		assert.Same(t, x, h.Remove(x.idx))
		assert.Equal(t, -1, x.idx)
	}
	check()
	prev := -1
	for h.Len() > 0 {
		x := h.Pop()
		assert.GreaterOrEqual(t, x.key, prev)
		assert.Equal(t, -1, x.idx)
		prev = x.key
	}
	assert.Nil(t, h.items, "an emptied heap lets its array go")
}

// Pushing and popping allocate nothing once the array has grown.
func TestNoAllocationPerPushAndPop(t *testing.T) {
	h := New(func(a, b int64) bool { return a < b }, nil)
	for i := range 64 {
		h.Push(int64(i))
	}
	for h.Len() > 1 {
		h.Pop()
	}
	// 63 stays at the bottom: the heap is never empty, and keeps its array.
	allocs := testing.AllocsPerRun(1000, func() {
		h.Push(5)
		h.Push(3)
		h.Pop()
		h.Pop()
		h.Push(1)
		h.Pop()
	})
	assert.Zero(t, allocs)
}
