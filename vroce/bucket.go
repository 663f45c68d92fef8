package vroce

// tokenBucket is packets that may leave now, refilled at a rate up to a
// burst: the one meter behind the congestion pacer, the READ pacer and
// the duplicate READ budget. Time is passed in (device nanoseconds); the
// rate, in packets a nanosecond, is the caller's, since the congestion
// pacer's changes with every window.
type tokenBucket struct {
	tokens float64
	at     int64 // when tokens was last brought up to date
}

// refill adds what rate earned since the last refill, holding at most burst.
func (b *tokenBucket) refill(now int64, rate, burst float64) {
	b.tokens = min(b.tokens+float64(now-b.at)*rate, burst)
	b.at = now
}

// fill makes the bucket full at now.
func (b *tokenBucket) fill(now int64, burst float64) { b.tokens, b.at = burst, now }

// take takes up to n whole tokens and returns how many it took.
func (b *tokenBucket) take(n int) int {
	k := min(n, int(b.tokens))
	b.tokens -= float64(k)
	return k
}

// whenOne is when the bucket, refilled at rate, next holds a whole token.
func (b *tokenBucket) whenOne(rate float64) int64 {
	return b.at + int64((1-b.tokens)/rate) + 1
}
