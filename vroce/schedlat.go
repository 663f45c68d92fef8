package vroce

import (
	"runtime/metrics"
	"sync"
	"sync/atomic"
)

// schedLatency is how long a runnable goroutine waits to run here now,
// from the runtime's own histogram (/sched/latencies:seconds): the
// receive turn's holder, the timer goroutine and a stream's reader are
// goroutines like any other, and when the process's goroutines outnumber
// its CPUs an ACK waits for one of them to be scheduled, for up to the
// scheduler's 10 ms slice. Loss probes and timeouts allow for it: with 32
// bulk streams in one process, a 1 ms probe floor and a 5 ms RTO fired
// spuriously 2,000 times in 3 s (retransmissions that were all
// duplicates); allowing for the scheduler's delay, 12 times.
//
// The device's timer and requesters read it when they arm timers; it is
// sampled again at most every schedSampleEvery.
type schedLatency struct {
	mu      sync.Mutex   // held by whoever samples
	at      atomic.Int64 // device time of the last sample
	samples []metrics.Sample
	counts  []uint64 // the histogram's buckets at the last sample
	p99     atomic.Int64
}

const (
	schedSampleEvery = 50_000_000 // ns
	// schedMinWaits is the fewest scheduling events a sample needs for
	// its percentile to stand; with fewer, the last one stands.
	schedMinWaits = 100
	// maxSchedAllowance caps the allowance at two of the scheduler's
	// 10 ms slices: a longer stall is a stall, which a timeout is for.
	maxSchedAllowance = 20_000_000
)

// allowance is what timers add for the scheduler's delay: the 99th
// percentile of recent waits.
func (s *schedLatency) allowance(now int64) int64 {
	if now-s.at.Load() >= schedSampleEvery && s.mu.TryLock() {
		s.sample(now)
		s.mu.Unlock()
	}
	return s.p99.Load()
}

// sample reads the histogram, under mu.
func (s *schedLatency) sample(now int64) {
	s.at.Store(now)
	if s.samples == nil {
		s.samples = []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	}
	metrics.Read(s.samples)
	v := s.samples[0].Value
	if v.Kind() != metrics.KindFloat64Histogram {
		return
	}
	h := v.Float64Histogram()
	if len(s.counts) != len(h.Counts) {
		s.counts = make([]uint64, len(h.Counts))
		copy(s.counts, h.Counts)
		return
	}
	if p, ok := percentileOfDelta(h.Buckets, h.Counts, s.counts, 0.99, schedMinWaits); ok {
		s.p99.Store(p)
	}
	copy(s.counts, h.Counts)
}

// percentileOfDelta is the q-th quantile, in ns, of the events counted
// in counts since before (both per bucket; buckets are the boundaries,
// one more than the counts), as the upper boundary of the bucket it
// falls in, at most maxSchedAllowance; false when fewer than minEvents
// came.
func percentileOfDelta(buckets []float64, counts, before []uint64, q float64, minEvents uint64) (int64, bool) {
	var total uint64
	for i := range counts {
		total += counts[i] - before[i]
	}
	if total < minEvents {
		return 0, false
	}
	want := uint64(float64(total) * q)
	var seen uint64
	for i := range counts {
		seen += counts[i] - before[i]
		if seen > want {
			upper := buckets[i+1] * 1e9 // +Inf, for the last
			return int64(min(upper, maxSchedAllowance)), true
		}
	}
	return 0, false
}
