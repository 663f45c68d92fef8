package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"vroce.dev/internal/testkit/netnstest"
)

// TestAFXDPBetweenNamespaces runs the vroce-perf command as on two hosts:
// a server in one network namespace and a client in another, each on an
// AF_XDP device on its end of a veth pair, with the comparison over the
// same veth through kernel TCP.
func TestAFXDPBetweenNamespaces(t *testing.T) {
	ha, hb := netnstest.Link(t, netnstest.LinkOpts{})
	bin := filepath.Join(t.TempDir(), "vroce-perf")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for i, c := range []struct {
		test string
		args []string
	}{
		{"write_bw", []string{"-n", "300", "--verify"}},
		{"send_bw", []string{"-s", "64", "-n", "20000"}},
		{"stream_bw", []string{"-n", "100", "--mode", "cm"}},
	} {
		t.Run(c.test, func(t *testing.T) {
			port := fmt.Sprint(18700 + i)
			server := exec.Command("ip", "netns", "exec", ha.NS, bin, c.test, "--provider", "afxdp", "--iface", ha.Dev, "--port", port, "--json")
			var serverErr bytes.Buffer
			server.Stderr = &serverErr
			if err := server.Start(); err != nil {
				t.Fatal(err)
			}
			waited := false
			defer func() {
				if !waited {
					server.Process.Kill()
					server.Wait()
				}
				if t.Failed() {
					t.Logf("server:\n%s", serverErr.String())
				}
			}()
			var out []byte
			var err error
			for try := 0; ; try++ { // until the server listens
				args := append([]string{"netns", "exec", hb.NS, bin, c.test, "--provider", "afxdp", "--iface", hb.Dev,
					"--port", port, "--compare", "tcp", "--json"}, c.args...)
				out, err = exec.Command("ip", append(args, ha.IP)...).CombinedOutput()
				if err == nil || try == 50 || !strings.Contains(string(out), "connection refused") {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err != nil {
				t.Fatalf("client: %v\n%s", err, out)
			}
			waited = true
			if err := server.Wait(); err != nil {
				t.Fatalf("server: %v", err)
			}
			var results []*result
			sc := bufio.NewScanner(strings.NewReader(string(out)))
			for sc.Scan() {
				var r result
				if json.Unmarshal(sc.Bytes(), &r) == nil && r.Test != "" {
					results = append(results, &r)
				}
			}
			if len(results) != 2 || results[0].Provider != "afxdp" || results[1].Provider != "tcp" || results[0].BWAvg <= 0 {
				t.Fatalf("results:\n%s", out)
			}
			if c.test == "write_bw" && !results[0].Verified {
				t.Fatalf("not verified:\n%s", out)
			}
			t.Logf("%s: afxdp %.0f MiB/s %.3f Mpps, tcp %.0f MiB/s", c.test, results[0].BWAvg, results[0].MsgRate, results[1].BWAvg)
		})
	}
}
