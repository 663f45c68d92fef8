package main

import (
	"bytes"
	"encoding/json"
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"

	"vroce.dev/internal/workload"
	"vroce.dev/vroce"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestEveryTestRunsVerifiedInLoopback(t *testing.T) {
	for _, provider := range []string{"sim", "udp"} {
		for test := range runners {
			if test == "conn_rate" {
				continue // TestConnRate
			}
			t.Run(provider+"/"+test, func(t *testing.T) {
				cfg := &config{params: params{Test: test, Iters: 64, QPs: 2, TxDepth: 16, Verify: true, Compare: "tcp"}, Provider: provider, Loopback: true, quietProg: true}
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
					if !cfg.isLat() && (r.BWAvg <= 0 || r.BWPeak < r.BWAvg || r.CPUPerGiB <= 0) {
						t.Fatalf("bandwidth columns %+v", r)
					}
					// Verbs QPs between two udp devices leave the ICRC to
					// the UDP checksum; the sim verifies none.
					if verbs := r.Provider != "tcp" && !strings.HasPrefix(test, "stream_"); verbs && r.UDPChecksum != (provider == "udp") {
						t.Fatalf("%s over %s: ICRC left to the UDP checksum %v", test, provider, r.UDPChecksum)
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

// The device's open time says the plugin's launch is in it only when a
// plugin was launched.
func TestDeviceOpenLineNamesTheLaunchOnlyForAPlugin(t *testing.T) {
	for _, c := range []struct {
		provider string
		ms       float64
		want     string
	}{
		{"udp", 0.5, " device opened in 0.5 ms\n"},
		{"plugin:udp", 14.8, " device opened in 14.8 ms, the plugin's launch included\n"},
	} {
		var out bytes.Buffer
		r := &result{Test: "send_lat", Provider: c.provider, Bytes: 64, Iterations: 10, DeviceOpenMs: c.ms}
		r.print(&out, false)
		assert.Contains(t, out.String(), c.want, c.provider)
		assert.Equal(t, 1, strings.Count(out.String(), "device opened"), c.provider)
	}
}

// Deadlines held for a stuck send are printed only when there were some.
func TestStallHoldsPrintOnlyWhenThereWereSome(t *testing.T) {
	for _, holds := range []uint64{0, 3} {
		var out bytes.Buffer
		r := &result{Test: "write_bw", Provider: "udp", Bytes: 65536, Iterations: 10, StallHolds: holds}
		r.print(&out, false)
		held := strings.Contains(out.String(), "loss deadlines held while a send of ours was stuck in this host 3\n")
		assert.Equal(t, holds > 0, held, "%d holds:\n%s", holds, out.String())
		assert.Equal(t, holds > 0, strings.Contains(out.String(), "held"), "%d holds", holds)
	}
}

// -mtu's help names exactly the path MTUs vroce takes.
func TestMTUChoicesAreTheValidMTUs(t *testing.T) {
	named := map[int]bool{}
	for _, f := range regexp.MustCompile(`[0-9]+`).FindAllString(mtuChoices, -1) {
		n, _ := strconv.Atoi(f)
		named[n] = true
	}
	for n := 1; n <= 1<<16; n++ {
		assert.Equal(t, vroce.MTU(n).Valid(), named[n], "MTU %d", n)
	}
}

func TestBadFlagsAreRefused(t *testing.T) {
	for _, c := range []config{
		{params: params{Test: "atomic_lat", Size: 16}},
		{params: params{Test: "write_bw", QPs: 0}},
		{params: params{Test: "write_bw", QPs: 1, TxDepth: 1, MTU: 1500}},
		{params: params{Test: "write_bw", QPs: 1, TxDepth: 1, Compare: "quic"}},
		{params: params{Test: "conn_rate", QPs: 10, TxDepth: 1, Mode: "rdma"}},
		{params: params{Test: "conn_rate", QPs: 10, TxDepth: 1, Mode: "cm", Compare: "tcp"}},
		{params: params{Test: "conn_rate", QPs: 10, TxDepth: 1, Mode: "cm", Backlog: -1}},
		// perftest's -b: write_bw, read_bw and send_bw, over the TCP exchange.
		{params: params{Test: "write_bw", QPs: 1, TxDepth: 1}, Duplex: true},
		{params: params{Test: "atomic_bw", QPs: 1, TxDepth: 1, Size: 8}, Oob: "perftest", Duplex: true},
		{params: params{Test: "write_bw", QPs: 1, TxDepth: 1}, Oob: "perftest", Duplex: true, RunFor: 2},
		{params: params{Test: "read_bw", QPs: 1, TxDepth: 1}, Oob: "perftest", Duplex: true, RDMACM: true},
	} {
		if err := c.finish(); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}

func TestPatternCatchesAnyChangedByte(t *testing.T) {
	b := make([]byte, 37)
	workload.Pattern(b, 5)
	if _, ok := workload.CheckPattern(b, 5); !ok {
		t.Fatal("a fresh pattern does not check")
	}
	for i := range b {
		b[i]++
		if at, ok := workload.CheckPattern(b, 5); ok || at/8 != i/8 {
			t.Fatalf("byte %d changed: ok=%v at=%d", i, ok, at)
		}
		b[i]--
	}
	if _, ok := workload.CheckPattern(b, 6); ok {
		t.Fatal("message 5 passes as message 6")
	}
}

// TestClientAndServerMeetOverTCP runs the two ends as vroce-perf does on
// two machines: a server with no peer address, a client with one, their
// devices on UDP, and the comparison on the control connection.
func TestClientAndServerMeetOverTCP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	srv := &config{params: params{Test: "read_bw", QPs: 1, TxDepth: 128}, Provider: "udp", DevAddr: "127.0.0.1:0", Port: port, JSON: true}
	cli := &config{params: params{Test: "read_bw", Iters: 200, Size: 20000, QPs: 2, TxDepth: 8, Verify: true, Compare: "tcp"}, Provider: "udp", DevAddr: "127.0.0.1:0", Port: port, Server: "127.0.0.1", quietProg: true}
	for _, c := range []*config{srv, cli} {
		if err := c.finish(); err != nil {
			t.Fatal(err)
		}
	}
	type outcome struct {
		results []*result
		err     error
	}
	served := make(chan outcome, 1)
	go func() {
		r, err := serveOne(srv, ln)
		served <- outcome{r, err}
	}()
	results, err := run(cli)
	if err != nil {
		t.Fatal(err)
	}
	s := <-served
	if s.err != nil {
		t.Fatalf("server: %v", s.err)
	}
	if len(results) != 2 || !results[0].Verified || results[0].Provider != "udp" || results[1].Provider != "tcp" {
		t.Fatalf("client results %+v", results)
	}
	if len(s.results) != 1 || s.results[0].BWAvg != results[0].BWAvg {
		t.Fatalf("the server reports %+v, the client %+v", s.results, results[0])
	}
}

// TestConnRate runs conn_rate both ways: in one process for each mode,
// and as client and server meeting over TCP, as on two machines. Every QP
// must connect, through a backlog smaller than the connects in flight.
func TestConnRate(t *testing.T) {
	for _, mode := range []string{"cm", "socket"} {
		t.Run(mode+"/loopback", func(t *testing.T) {
			cfg := &config{params: params{Test: "conn_rate", Mode: mode, TxDepth: 1, QPs: 1500, Backlog: 32, Concurrency: 256}, Provider: "udp", Loopback: true, quietProg: true}
			if err := cfg.finish(); err != nil {
				t.Fatal(err)
			}
			results, err := run(cfg)
			if err != nil {
				t.Fatal(err)
			}
			checkConnRate(t, results, cfg)
		})
	}
	t.Run("cm/client-server", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		port := ln.Addr().(*net.TCPAddr).Port
		srv := &config{params: params{Test: "conn_rate", QPs: 1, TxDepth: 1, Mode: "cm", Backlog: 16}, Provider: "udp", DevAddr: "127.0.0.1:0", Port: port}
		cli := &config{params: params{Test: "conn_rate", QPs: 500, TxDepth: 1, Mode: "cm"}, Provider: "udp", DevAddr: "127.0.0.1:0", Port: port, Server: "127.0.0.1", quietProg: true}
		for _, c := range []*config{srv, cli} {
			if err := c.finish(); err != nil {
				t.Fatal(err)
			}
		}
		served := make(chan error, 1)
		go func() {
			_, err := serveOne(srv, ln)
			served <- err
		}()
		results, err := run(cli)
		if err != nil {
			t.Fatal(err)
		}
		if err := <-served; err != nil {
			t.Fatalf("server: %v", err)
		}
		checkConnRate(t, results, cli)
		if results[0].ServerBytesPerQP <= 0 {
			t.Fatalf("no server measurement: %+v", results[0])
		}
	})
}

func checkConnRate(t *testing.T, results []*result, cfg *config) {
	t.Helper()
	if len(results) != 1 {
		t.Fatalf("%d results", len(results))
	}
	r := results[0]
	if r.Established != cfg.QPs || r.QPs != cfg.QPs || r.ConnsPerSec <= 0 || r.BytesPerQP <= 0 || r.Mode != cfg.Mode {
		t.Fatalf("result %+v", r)
	}
	var out bytes.Buffer
	r.print(&out, true)
	var m map[string]any
	if err := json.Unmarshal(out.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"qps", "established", "seconds", "conns_per_sec", "bytes_per_qp"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON lacks %q: %s", k, out.String())
		}
	}
}

// TestStreamTests runs stream_bw and stream_lat over rsock in both modes,
// verified, next to TCP, on the real UDP provider and on the simulated
// network with loss.
func TestStreamTests(t *testing.T) {
	for _, c := range []struct{ provider, mode string }{{"udp", "socket"}, {"udp", "cm"}, {"sim", "cm"}} {
		for _, test := range []string{"stream_bw", "stream_lat"} {
			t.Run(c.provider+"/"+c.mode+"/"+test, func(t *testing.T) {
				cfg := &config{params: params{Test: test, Mode: c.mode, Iters: 200, Size: 10000, TxDepth: 1, QPs: 1, Verify: true, Compare: "tcp"}, Provider: c.provider, Loopback: true, quietProg: true}
				if c.provider == "sim" {
					cfg.Loss = 0.01
				}
				if err := cfg.finish(); err != nil {
					t.Fatal(err)
				}
				results, err := run(cfg)
				if err != nil {
					t.Fatal(err)
				}
				if len(results) != 2 || results[0].Provider != c.provider || results[1].Provider != "tcp" || results[0].Mode != c.mode {
					t.Fatalf("results %+v", results)
				}
				for _, r := range results {
					if !r.Verified || r.Iterations != 200 || r.Seconds <= 0 || (test == "stream_bw" && (r.BWAvg <= 0 || r.CPUPerGiB <= 0)) || (test == "stream_lat" && r.LatTypical <= 0) {
						t.Fatalf("result %+v", r)
					}
				}
			})
		}
	}
}
