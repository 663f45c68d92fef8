package main

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Both workloads run over QUIC and TCP with every message checked, and
// print vroce-perf's JSON: what the results page reads.
func TestWorkloadsRunOverQUICAndTCP(t *testing.T) {
	for _, test := range []string{"stream_bw", "stream_lat"} {
		var out bytes.Buffer
		if err := run([]string{test, "-s", "3000", "-n", "200", "--verify", "--json"}, &out); err != nil {
			t.Fatalf("%s: %v", test, err)
		}
		var providers []string
		for line := range strings.Lines(out.String()) {
			var r result
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				t.Fatalf("%s: %q: %v", test, line, err)
			}
			providers = append(providers, r.Provider)
			if r.Provider == "quic" && !strings.HasPrefix(r.Version, "v") {
				t.Errorf("%s: quic-go's version is %q", test, r.Version)
			}
			if r.Test != test || r.Bytes != 3000 || r.Iterations != 200 || !r.Verified {
				t.Errorf("%s: %+v", test, r)
			}
			if test == "stream_bw" && (r.BWAvg <= 0 || r.CPUPerGiB <= 0) {
				t.Errorf("stream_bw over %s: no bandwidth or CPU: %+v", r.Provider, r)
			}
			if test == "stream_lat" && (r.LatTypical <= 0 || r.LatP99 < r.LatTypical) {
				t.Errorf("stream_lat over %s: latencies out of order: %+v", r.Provider, r)
			}
		}
		if strings.Join(providers, ",") != "quic,tcp" {
			t.Errorf("%s: results for %v, want quic then tcp", test, providers)
		}
	}
}

// A client that gives up mid-run (a damaged echo, an error) leaves the
// server blocked in a read: finishing must still end both ends.
func TestFinishEndsAServerMidRead(t *testing.T) {
	for _, tr := range []transport{quicTransport{}, tcpTransport{}} {
		client, finish, err := tr.start(func(s io.ReadWriter) error {
			_, err := io.ReadFull(s, make([]byte, 10)) // only one byte comes
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := client.Write([]byte{1}); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- finish() }()
		select {
		case err := <-done:
			if err == nil {
				t.Errorf("%s: the server's cut-short read reported no error", tr.name())
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: finish hangs on a server blocked in a read", tr.name())
		}
	}
}

func TestBadArgumentsAreRefused(t *testing.T) {
	for _, args := range [][]string{nil, {"send_bw"}, {"stream_bw", "-s", "0"}, {"stream_lat", "-n", "-1"}, {"stream_bw", "-x"}} {
		if err := run(args, io.Discard); err == nil {
			t.Errorf("%q accepted", args)
		}
	}
}
