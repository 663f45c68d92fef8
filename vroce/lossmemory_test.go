package vroce

import "testing"

// A requester probes for a lost tail after quietProbeFloor until the path
// shows it loses packets; then after two RTTs, for lossMemory. A probe the
// responder reports as a duplicate (a D-SACK) shows nothing, and is
// undone.
func TestProbeFloorFollowsTheLossesThePathShows(t *testing.T) {
	var r requester
	r.rtt.sample(20_000) // a 20 us path: a fast probe comes well under 1 ms
	fast := r.rtt.pto(0)
	if fast >= quietProbeFloor {
		t.Fatalf("fast probe timeout %d ns, want under the quiet floor", fast)
	}
	check := func(what string, now, want int64) {
		t.Helper()
		if got := r.rtt.pto(r.probeFloor(now)); got != want {
			t.Fatalf("%s: probe after %d ns, want %d", what, got, want)
		}
	}
	now := int64(10 * lossMemory)
	check("clean path", now, quietProbeFloor)

	r.lossSuspected(100, now) // a probe resends PSN 100
	check("a probe, not yet answered", now+1, fast)
	r.onDuplicateReported(100)
	check("the probe's PSN arrived twice", now+2, quietProbeFloor)

	r.lossSuspected(101, now+3)
	r.lossSuspected(101, now+4) // probed again: the same suspicion
	r.onDuplicateReported(99)   // some other duplicate: no news on 101
	check("D-SACK of another PSN", now+5, fast)
	r.onDuplicateReported(101)
	check("both probes of 101 undone", now+6, quietProbeFloor)

	r.lossSuspected(102, now+7)
	r.lossSuspected(103, now+8) // 102 drew no D-SACK: it was lost
	r.onDuplicateReported(103)
	check("103 undone, 102 stands", now+9, fast)
	check("lossMemory after 102", now+7+lossMemory, quietProbeFloor)

	r.lossProven(now + 10) // a SACK showed a hole
	r.onDuplicateReported(103)
	check("proven loss survives a late D-SACK", now+11, fast)
	check("proven loss forgotten after lossMemory", now+10+lossMemory, quietProbeFloor)
}
