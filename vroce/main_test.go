package vroce_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"vroce.dev/internal/testkit/verbstest"
	"vroce.dev/vroce"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type node = verbstest.Node

var (
	waitCompletions = verbstest.WaitCompletions
	mustSucceed     = verbstest.MustSucceed
	fill            = verbstest.Fill
	defaultOpts     = verbstest.DefaultOpts
	simPair         = verbstest.SimPair
	waitFor         = verbstest.WaitFor
)

// waitEvent waits up to 5 seconds for an asynchronous event of type typ
// that match accepts, skipping others.
func waitEvent(t *testing.T, dev *vroce.Device, typ vroce.EventType, match func(vroce.AsyncEvent) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for {
		ev, err := dev.AsyncEvent(ctx)
		if err != nil {
			t.Fatalf("waiting for %v: %v", typ, err)
		}
		if ev.Type == typ && match(ev) {
			return
		}
	}
}
