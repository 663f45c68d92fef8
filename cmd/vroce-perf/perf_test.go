package main

import (
	"bytes"
	"encoding/json"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestEveryTestRunsVerifiedInLoopback(t *testing.T) {
	for _, provider := range []string{"sim", "udp"} {
		for test := range tests {
			t.Run(provider+"/"+test, func(t *testing.T) {
				cfg := &config{Test: test, Provider: provider, Iters: 64, QPs: 2, TxDepth: 16, Verify: true, Loopback: true, Compare: "tcp", quietProg: true}
				if !cfg.isLat() {
					cfg.Size = 10000 // not a multiple of the MTU or of 8
				}
				if err := cfg.finish(); err != nil {
					t.Fatal(err)
				}
				results, err := run(cfg)
				if err != nil {
					t.Fatal(err)
				}
				if len(results) != 2 || results[0].Provider != provider || results[1].Provider != "tcp" {
					t.Fatalf("results %+v", results)
				}
				for _, r := range results {
					if !r.Verified || r.Iterations != 64 || r.Test != test || r.Seconds <= 0 {
						t.Fatalf("result %+v", r)
					}
					if cfg.isLat() && (r.LatTypical <= 0 || r.LatP99 < r.LatTypical) {
						t.Fatalf("latency columns %+v", r)
					}
					if !cfg.isLat() && (r.BWAvg <= 0 || r.BWPeak < r.BWAvg) {
						t.Fatalf("bandwidth columns %+v", r)
					}
				}
			})
		}
	}
}

func TestJSONHasTheDocumentedFields(t *testing.T) {
	var out bytes.Buffer
	r := &result{Test: "write_bw", Provider: "udp", Bytes: 65536, Iterations: 10, Verified: true}
	r.print(&out, true)
	var m map[string]any
	if err := json.Unmarshal(out.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"test", "provider", "bytes", "iterations", "bw_avg_mibps", "msg_rate_mpps", "lat_typical_us", "lat_p99_us", "verified"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON lacks %q: %s", k, out.String())
		}
	}
}

func TestBadFlagsAreRefused(t *testing.T) {
	for _, c := range []config{
		{Test: "atomic_lat", Size: 16},
		{Test: "write_bw", QPs: 0},
		{Test: "write_bw", QPs: 1, TxDepth: 1, MTU: 1500},
		{Test: "write_bw", QPs: 1, TxDepth: 1, Compare: "quic"},
	} {
		if err := c.finish(); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}

func TestPatternCatchesAnyChangedByte(t *testing.T) {
	b := make([]byte, 37)
	pattern(b, 5)
	if _, ok := checkPattern(b, 5); !ok {
		t.Fatal("a fresh pattern does not check")
	}
	for i := range b {
		b[i]++
		if at, ok := checkPattern(b, 5); ok || at/8 != i/8 {
			t.Fatalf("byte %d changed: ok=%v at=%d", i, ok, at)
		}
		b[i]--
	}
	if _, ok := checkPattern(b, 6); ok {
		t.Fatal("message 5 passes as message 6")
	}
}
