package clock

import "time"

// Epoch is a monotonic origin for the engine's times: deadlines and
// timestamps are nanoseconds since it, as int64, cheap to store and
// compare, and what a Clock made from it is armed with. A device and a
// connection manager each take one when they start.
type Epoch struct{ start time.Time }

// NewEpoch starts an epoch now.
func NewEpoch() Epoch { return Epoch{start: time.Now()} }

// Now is the time since the epoch began, in nanoseconds, on the monotonic
// clock.
func (e Epoch) Now() int64 { return int64(time.Since(e.start)) }

// Time is the wall-and-monotonic time the epoch began.
func (e Epoch) Time() time.Time { return e.start }
