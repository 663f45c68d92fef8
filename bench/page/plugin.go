package main

import (
	"fmt"
	"io"
)

// pluginTests are issue 22's workloads for a provider out of process.
var pluginTests = []struct {
	test string
	args []string
}{
	{"write_bw", []string{"-s", "65536", "-n", "8192", "--verify"}},
	{"stream_bw", []string{"-s", "65536", "-n", "8192"}},
	{"send_lat", []string{"-s", "64", "-n", "5000"}},
}

// runPlugin measures each workload over the udp provider in process and
// over plugin:udp (vroce-provider-udp beside vroce-perf), one after the
// other, runs times on each link, and reports each pair and its ratio
// (for latency, the difference).
func runPlugin(w io.Writer, perf string, runs int, links []*link) error {
	for _, l := range links {
		for _, t := range pluginTests {
			for r := range max(runs, 1) {
				var got [2]float64
				for i, prov := range []string{"udp", "plugin:udp"} {
					l.provider = prov
					pts, err := l.run(perf, t.test, t.args)
					l.provider = ""
					if err != nil {
						return err
					}
					v, _ := byProvider(pts, t.test)
					if len(v) == 0 {
						return fmt.Errorf("%s %s over %s: no result", l.name, t.test, prov)
					}
					got[i] = v[0].figure()
				}
				if isLatency(t.test) {
					fmt.Fprintf(w, "%s %-9s run %d: in process %7.1f us, plugin %7.1f us (+%.1f us)\n", l.name, t.test, r+1, got[0], got[1], got[1]-got[0])
				} else {
					fmt.Fprintf(w, "%s %-9s run %d: in process %7.1f MiB/s, plugin %7.1f MiB/s (%.2fx)\n", l.name, t.test, r+1, got[0], got[1], got[1]/got[0])
				}
			}
		}
	}
	return nil
}
