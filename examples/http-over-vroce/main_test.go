package main

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"
	"vroce.dev/rsock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestExample runs the example short: every response checked, HTTP/1.1
// and HTTP/2 over vRoCE in both modes, then over TCP.
func TestExample(t *testing.T) {
	for _, mode := range []string{"socket", "cm"} {
		t.Run(mode, func(t *testing.T) {
			results, err := run(context.Background(), config{Requests: 100, Concurrency: 4, BodySize: 20000, Mode: mode})
			if err != nil {
				t.Fatal(err)
			}
			want := []struct{ proto, transport string }{{"HTTP/1.1", "vroce"}, {"HTTP/1.1", "tcp"}, {"HTTP/2.0", "vroce"}, {"HTTP/2.0", "tcp"}}
			if len(results) != len(want) {
				t.Fatalf("%d results", len(results))
			}
			for i, r := range results {
				t.Log(r)
				if r.Proto != want[i].proto || r.Transport != want[i].transport || r.ServerTransport != want[i].transport || r.PerSecond <= 0 {
					t.Fatalf("result %d: %+v, want %s over %s on both sides", i, r, want[i].proto, want[i].transport)
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
