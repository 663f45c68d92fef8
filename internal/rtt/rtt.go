package rtt

// Estimator smooths round-trip samples, in nanoseconds. The zero value
// has no sample yet; every field reads 0 until the first.
type Estimator struct {
	SRTT   int64 // smoothed RTT
	RTTVar int64 // its mean deviation
	MinRTT int64 // the least sample: the path's base RTT
	Latest int64 // the last sample
}

// Sample takes one measurement; a non-positive one is ignored.
func (e *Estimator) Sample(rtt int64) {
	if rtt <= 0 {
		return
	}
	e.Latest = rtt
	if e.SRTT == 0 {
		e.SRTT, e.RTTVar, e.MinRTT = rtt, rtt/2, rtt
		return
	}
	e.MinRTT = min(e.MinRTT, rtt)
	d := e.SRTT - rtt
	if d < 0 {
		d = -d
	}
	e.RTTVar += (d - e.RTTVar) / 4
	e.SRTT += (rtt - e.SRTT) / 8
}

// Timeout is RFC 6298's retransmission timeout before its floor and
// backoff, SRTT + 4 RTTVAR, with at least least for the variation; 0
// before the first sample.
func (e *Estimator) Timeout(least int64) int64 {
	if e.SRTT == 0 {
		return 0
	}
	return e.SRTT + max(4*e.RTTVar, least)
}
