package rsock

import (
	"context"
	"net/netip"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vroce.dev/vroce/cm"
)

// fakeProbe is a probe that answers when told to, or ends silent when
// its context does, and counts how often it was started.
type fakeProbe struct {
	started  atomic.Int32
	answer   chan cm.ProbeResult
	canceled chan struct{} // closed when a probe's context ended first
}

func newFakeProbe() *fakeProbe {
	return &fakeProbe{answer: make(chan cm.ProbeResult), canceled: make(chan struct{})}
}

func (p *fakeProbe) run(ctx context.Context) cm.ProbeResult {
	p.started.Add(1)
	select {
	case r := <-p.answer:
		return r
	case <-ctx.Done():
		close(p.canceled)
		return cm.ProbeSilent
	}
}

var testService = netip.MustParseAddrPort("10.0.0.1:4791")

// Dials to one service while its probe is in flight share it and its
// answer; once answered, the next dial probes afresh.
func TestDialsAtOnceShareOneProbe(t *testing.T) {
	var fs probeFlights
	fp := newFakeProbe()
	a := fs.join(testService, fp.run)
	b := fs.join(testService, fp.run)
	other := fs.join(netip.MustParseAddrPort("10.0.0.2:4791"), fp.run)

	fp.answer <- cm.ProbeListening // one of the two probes started
	fp.answer <- cm.ProbeNotListening
	<-a.answered()
	<-other.answered()
	assert.Equal(t, int32(2), fp.started.Load(), "one probe per service")
	assert.Equal(t, a.result(), b.result(), "both dials hear the one answer")
	assert.Equal(t, map[cm.ProbeResult]bool{cm.ProbeListening: true, cm.ProbeNotListening: true},
		map[cm.ProbeResult]bool{a.result(): true, other.result(): true})

	c := fs.join(testService, fp.run)
	fp.answer <- cm.ProbeNoDevice
	<-c.answered()
	assert.Equal(t, cm.ProbeNoDevice, c.result(), "an ended probe vouches for nothing: the next dial probes")
	assert.Equal(t, int32(3), fp.started.Load())
}

// A dial that gives up leaves the probe running for the others; the
// last to leave ends it, and a dial that left before the answer hears
// ProbeSilent.
func TestTheLastDialToLeaveEndsTheProbe(t *testing.T) {
	var fs probeFlights
	fp := newFakeProbe()
	a := fs.join(testService, fp.run)
	b := fs.join(testService, fp.run)

	assert.Equal(t, cm.ProbeSilent, a.result(), "left before any answer")
	assert.Equal(t, cm.ProbeSilent, a.result(), "leaving twice counts once")
	select {
	case <-fp.canceled:
		t.Fatal("the probe ended while a dial still waits for it")
	default:
	}
	assert.Equal(t, cm.ProbeSilent, b.result())
	<-fp.canceled // the last dial left: the probe ends
	<-a.answered()

	c := fs.join(testService, func(context.Context) cm.ProbeResult { return cm.ProbeListening })
	<-c.answered()
	require.Equal(t, cm.ProbeListening, c.result(), "a new dial does not join the ended probe")
}
