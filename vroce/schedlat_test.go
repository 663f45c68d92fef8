package vroce

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
)

// The allowance is the bucket the 99th percentile of the waits since the
// last sample falls in, at most maxSchedAllowance; too few waits keep
// the last.
func TestPercentileOfDelta(t *testing.T) {
	buckets := []float64{0, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, math.Inf(1)}
	before := []uint64{5, 5, 5, 5, 5, 5}
	// 1,000 waits since: 980 under 1 us, 15 under 1 ms, 5 under 10 ms.
	counts := []uint64{985, 5, 5, 20, 10, 5}
	p, ok := percentileOfDelta(buckets, counts, before, 0.99, 100)
	assert.True(t, ok)
	assert.Equal(t, int64(1e6), p, "the 991st of 1,000 waits is under 1 ms")

	counts = []uint64{985, 5, 5, 5, 5, 35}
	p, ok = percentileOfDelta(buckets, counts, before, 0.99, 100)
	assert.True(t, ok)
	assert.Equal(t, int64(maxSchedAllowance), p, "waits beyond every bound are capped")

	_, ok = percentileOfDelta(buckets, []uint64{55, 5, 5, 5, 5, 5}, before, 0.99, 100)
	assert.False(t, ok, "50 waits are too few")
}
