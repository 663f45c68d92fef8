package main

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"
	"vroce.dev/rsock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestExample runs the example short, in both modes: every kind of call
// and the health service over vRoCE, then over TCP, answers checked.
func TestExample(t *testing.T) {
	for _, mode := range []string{"socket", "cm"} {
		t.Run(mode, func(t *testing.T) {
			for _, overVRoCE := range []bool{true, false} {
				r, err := measure(context.Background(), config{Calls: 300, Concurrency: 4, Mode: mode}, overVRoCE)
				if err != nil {
					t.Fatal(err)
				}
				t.Log(r)
				want := "tcp"
				if overVRoCE {
					want = "vroce"
				}
				if r.Transport != want || r.ServerTransport != want || r.PerSecond <= 0 {
					t.Fatalf("%+v, want %s on both sides", r, want)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := rsock.Drain(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}
