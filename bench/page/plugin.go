package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// pluginProvider is the provider out of process the page measures.
const pluginProvider = "plugin:udp"

// pluginTable writes, for one link, each workload over the provider out
// of process beside the same workload in process (vp, from the page's
// own runs) and kernel TCP in the plugin's run.
func pluginTable(b *strings.Builder, vp, plugged []point) {
	if len(plugged) == 0 {
		return
	}
	b.WriteString("## The same through a provider out of process (`plugin:udp`)\n\n")
	row(b, "workload", "bytes", "in process", "plugin:udp", "plugin / in process", "plugin / TCP")
	row(b, "---", "---", "---", "---", "---", "---")
	for _, test := range []string{"write_bw", "stream_bw", "send_lat"} {
		pv, pk := byProvider(plugged, test)
		v, _ := byProvider(vp, test)
		for i := range min(len(pv), len(pk)) {
			j := slices.IndexFunc(v, func(p point) bool { return p.Bytes == pv[i].Bytes })
			if j < 0 {
				continue
			}
			unit, vs := " MiB/s", fmt.Sprintf("%.2fx", pv[i].figure()/v[j].figure())
			if isLatency(test) {
				unit, vs = " µs", fmt.Sprintf("%+.1f µs", pv[i].figure()-v[j].figure())
			}
			row(b, test, fmt.Sprint(pv[i].Bytes), fmt.Sprintf("%.1f%s", v[j].figure(), unit), fmt.Sprintf("%.1f%s", pv[i].figure(), unit),
				vs, fmt.Sprintf("%.2fx", pv[i].figure()/pk[i].figure()))
		}
	}
	b.WriteString("\n")
}

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
	var opens [2][]float64 // device opens, in process and plugin, every run
	defer func() {
		for i, name := range []string{"in process", "plugin (its launch included)"} {
			if o := opens[i]; len(o) > 0 {
				slices.Sort(o)
				fmt.Fprintf(w, "device open, %s: p50 %.1f ms (%.1f-%.1f, %d opens)\n", name, o[len(o)/2], o[0], o[len(o)-1], len(o))
			}
		}
	}()
	for _, l := range links {
		for _, t := range pluginTests {
			for r := range max(runs, 1) {
				var got [2]float64
				for i, prov := range []string{"udp", pluginProvider} {
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
					if v[0].DeviceOpenMs > 0 {
						opens[i] = append(opens[i], v[0].DeviceOpenMs)
					}
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
