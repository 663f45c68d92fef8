package main

import (
	"encoding/xml"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPageAndPlots(t *testing.T) {
	all := []point{
		{Test: "write_bw", Provider: "udp", Bytes: 1024, BWAvg: 100, CPUPerGiB: 2},
		{Test: "write_bw", Provider: "tcp", Bytes: 1024, BWAvg: 200, CPUPerGiB: 1},
		{Test: "write_bw", Provider: "udp", Bytes: 65536, BWAvg: 300},
		{Test: "write_bw", Provider: "tcp", Bytes: 65536, BWAvg: 150},
		{Test: "send_lat", Provider: "udp", Bytes: 64, LatTypical: 30},
		{Test: "send_lat", Provider: "tcp", Bytes: 64, LatTypical: 10},
		{Test: "write_bw", Provider: pluginProvider, Bytes: 65536, BWAvg: 150, Via: pluginProvider},
		{Test: "write_bw", Provider: "tcp", Bytes: 65536, BWAvg: 100, Via: pluginProvider},
	}
	for i := range all {
		all[i].Tool = vrocePerf
	}
	p := page(all)
	if want := "| write_bw | 65536 | 300.0 MiB/s | 150.0 MiB/s | 0.50x | 1.50x |\n"; !strings.Contains(p, want) {
		t.Errorf("the page lacks the plugin row %q:\n%s", want, p)
	}
	for _, want := range []string{"| 1024 | 100.0 | 200.0 | 0.50x | 2.00 | 1.00 |\n", "| 65536 | 300.0 | 150.0 | 2.00x | - | - |\n", "| 64 | 30.0 | 10.0 | 3.00x |\n"} {
		if !strings.Contains(p, want) {
			t.Errorf("the page lacks %q:\n%s", want, p)
		}
	}
	if strings.Contains(p, "quic") {
		t.Errorf("a page without quic-perf results mentions QUIC:\n%s", p)
	}
	// Latency runs measure no CPU per GiB: their tables have no column for it.
	if lat := p[strings.Index(p, "## Verbs SEND latency"):]; strings.Contains(lat[:strings.Index(lat, "| 64 |")], "CPU") {
		t.Errorf("the latency table has CPU columns:\n%s", lat)
	}
	s := svg("t", "MiB/s", []series{pick(all, "write_bw", "udp", func(p point) float64 { return p.BWAvg })})
	if err := xml.Unmarshal([]byte(s), new(struct{})); err != nil {
		t.Fatalf("not XML: %v", err)
	}
	if strings.Count(s, "<circle") != 2 || !strings.Contains(s, "<polyline") {
		t.Fatalf("plot: %s", s)
	}
}

// quic-perf's figures join the stream tables with the ratio to their own
// run's TCP figure, never to vroce-perf's.
func TestQUICColumnsUseTheirOwnTCPRun(t *testing.T) {
	all := []point{
		{Tool: vrocePerf, Test: "stream_bw", Provider: "udp", Bytes: 1024, BWAvg: 100, CPUPerGiB: 2},
		{Tool: vrocePerf, Test: "stream_bw", Provider: "tcp", Bytes: 1024, BWAvg: 200, CPUPerGiB: 1},
		{Tool: quicPerf, Test: "stream_bw", Provider: "quic", Bytes: 1024, BWAvg: 30, CPUPerGiB: 7, Version: "v9.9.9"},
		{Tool: quicPerf, Test: "stream_bw", Provider: "tcp", Bytes: 1024, BWAvg: 300, CPUPerGiB: 1},
		{Tool: vrocePerf, Test: "stream_bw", Provider: "udp", Bytes: 4096, BWAvg: 100},
		{Tool: vrocePerf, Test: "stream_bw", Provider: "tcp", Bytes: 4096, BWAvg: 100},
		{Tool: vrocePerf, Test: "write_bw", Provider: "udp", Bytes: 1024, BWAvg: 100},
		{Tool: vrocePerf, Test: "write_bw", Provider: "tcp", Bytes: 1024, BWAvg: 100},
		{Tool: vrocePerf, Test: "stream_lat", Provider: "udp", Bytes: 64, LatTypical: 20},
		{Tool: vrocePerf, Test: "stream_lat", Provider: "tcp", Bytes: 64, LatTypical: 10},
		{Tool: quicPerf, Test: "stream_lat", Provider: "quic", Bytes: 64, LatTypical: 40, Version: "v9.9.9"},
		{Tool: quicPerf, Test: "stream_lat", Provider: "tcp", Bytes: 64, LatTypical: 8},
	}
	p := page(all)
	for _, want := range []string{
		"quic-go v9.9.9",
		"| 64 | 20.0 | 10.0 | 2.00x | 40.0 | 5.00x |\n", // latency: no CPU columns
		"| 1024 | 100.0 | 200.0 | 0.50x | 2.00 | 1.00 | 30.0 | 0.10x | 7.00 |\n",
		"| 4096 | 100.0 | 100.0 | 1.00x | - | - | - | - | - |\n", // no QUIC run at this size
		"| 1024 | 100.0 | 100.0 | 1.00x | - | - |\n",             // write_bw has no QUIC columns
	} {
		if !strings.Contains(p, want) {
			t.Errorf("the page lacks %q:\n%s", want, p)
		}
	}
}

// Of several runs of one point, the run with the median vRoCE/TCP ratio
// is kept whole: its two figures stay from one process.
func TestMedianRunKeepsOneRunsPair(t *testing.T) {
	run := func(vroce, tcp float64) []point {
		return []point{{Test: "write_bw", Provider: "udp", BWAvg: vroce}, {Test: "write_bw", Provider: "tcp", BWAvg: tcp}}
	}
	got := medianRun([][]point{run(100, 100), run(300, 100), run(90, 300), nil})
	if len(got) != 2 || got[0].BWAvg != 100 || got[1].BWAvg != 100 {
		t.Fatalf("median of ratios 1, 3 and 0.3: got %+v, want the 1.0 run", got)
	}
	lat := []point{{Test: "send_lat", Provider: "udp", LatTypical: 30}, {Test: "send_lat", Provider: "tcp", LatTypical: 10}}
	if got := medianRun([][]point{lat}); len(got) != 2 || got[0].LatTypical != 30 {
		t.Fatalf("one run: got %+v", got)
	}
}

// A target's verdict judges the median of its runs against the goal: at
// least the goal for bandwidth and goodput, at most for latency; an even
// count takes the lower middle.
func TestVerdictJudgesTheMedian(t *testing.T) {
	var b strings.Builder
	verdict(&b, "bw", []float64{0.5, 1.1, 1.2}, 1.0, false)
	verdict(&b, "lat", []float64{1.5, 1.2, 2.0}, 1.25, true)
	verdict(&b, "none", nil, 1.0, false)
	verdict(&b, "even", []float64{1.3, 0.9}, 1.0, false)
	r := b.String()
	for _, want := range []string{
		"bw\n  runs 0.50 1.10 1.20 (spread 0.50-1.20)\n  median 1.10, target >= 1.00: met",
		"lat\n  runs 1.50 1.20 2.00 (spread 1.20-2.00)\n  median 1.50, target <= 1.25: not met",
		"none: no results",
		"even\n  runs 1.30 0.90 (spread 0.90-1.30)\n  median 0.90, target >= 1.00: not met",
	} {
		if !strings.Contains(r, want) {
			t.Errorf("the report lacks %q:\n%s", want, r)
		}
	}
}

// The page leads with the two-namespace links, each under its own
// heading, and keeps loopback last.
func TestPageLeadsWithTheLinks(t *testing.T) {
	all := []point{
		{Tool: vrocePerf, Link: "loopback", Test: "send_lat", Provider: "udp", Bytes: 64, LatTypical: 15},
		{Tool: vrocePerf, Link: "loopback", Test: "send_lat", Provider: "tcp", Bytes: 64, LatTypical: 12},
		{Tool: vrocePerf, Link: "veth1500", Test: "send_lat", Provider: "udp", Bytes: 64, LatTypical: 30},
		{Tool: vrocePerf, Link: "veth1500", Test: "send_lat", Provider: "tcp", Bytes: 64, LatTypical: 20},
	}
	p := page(all)
	veth := strings.Index(p, "# two processes, two network namespaces, veth MTU 1500")
	loop := strings.Index(p, "# one process, loopback")
	if veth < 0 || loop < 0 || veth > loop {
		t.Fatalf("want the veth section, then loopback:\n%s", p)
	}
	if !strings.Contains(p[veth:loop], "| 64 | 30.0 | 20.0 | 1.50x |") || !strings.Contains(p[loop:], "| 64 | 15.0 | 12.0 | 1.25x |") {
		t.Fatalf("each section holds its own link's figures:\n%s", p)
	}
	if recordLink(all) != "veth1500" {
		t.Fatalf("the plots show %s, want veth1500", recordLink(all))
	}
}

func TestPinnedEndsRunUnderTaskset(t *testing.T) {
	l := &link{pin: &placement{"two CPUs", [2]int{0, 1}}}
	require.Equal(t, []string{"ip", "netns", "exec", "nsA", "taskset", "-c", "0", "perf", "send_lat"},
		l.command("nsA", 0, "perf", "send_lat").Args)
	require.Equal(t, []string{"ip", "netns", "exec", "nsB", "taskset", "-c", "1", "perf", "send_lat"},
		l.command("nsB", 1, "perf", "send_lat").Args)
	l.name = "veth1500"
	require.Equal(t, "veth1500 (two CPUs)", l.title())
	require.NoError(t, l.pinned(nil, func() error {
		require.Equal(t, []string{"ip", "netns", "exec", "nsB", "perf", "send_lat"}, l.command("nsB", 1, "perf", "send_lat").Args)
		require.Equal(t, "veth1500", l.title())
		return nil
	}))
	require.Nil(t, l.pin, "pinned leaves the link unpinned")
}

func TestPlacementsShareOneCPUThenSplitTwo(t *testing.T) {
	ps := placements()
	if runtime.GOOS != "linux" {
		require.Empty(t, ps)
		return
	}
	require.NotEmpty(t, ps)
	require.Equal(t, ps[0].cpus[0], ps[0].cpus[1], "the first placement shares a CPU")
	if runtime.NumCPU() >= 2 {
		require.Len(t, ps, 2)
		require.NotEqual(t, ps[1].cpus[0], ps[1].cpus[1], "the second gives each end its own")
	}
}

func TestStealIsProcStatsEighthValueInTicks(t *testing.T) {
	require.Equal(t, 2190*10*time.Millisecond, stealOf([]byte("cpu  4145757 0 1697661 8592910 24308 0 729620 2190 0 0")))
	require.Zero(t, stealOf([]byte("cpu0 1 2 3 4 5 6 7 8 9 10")), "a single CPU's line")
	require.Zero(t, stealOf([]byte("cpu  1 2 3 4")), "a kernel without the column")
	require.Zero(t, stealOf([]byte("cpu  1 2 3 4 5 6 7 x")))
}

func TestCPUNameTellsGenerationsApart(t *testing.T) {
	info := "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 23\nmodel\t\t: 1\nmodel name\t: AMD EPYC\nflags\t\t: fpu\n\nprocessor\t: 1\ncpu family\t: 25\nmodel\t\t: 17\nmodel name\t: AMD EPYC 9R14\n"
	require.Equal(t, "AMD EPYC, family 23 model 1", cpuNameOf(info), "the first processor's, numbered")
	require.Equal(t, "Neoverse-N1", cpuNameOf("processor\t: 0\nmodel name\t: Neoverse-N1\n"), "no family and model to add")
	require.Empty(t, cpuNameOf("processor\t: 0\nBogoMIPS\t: 50.00\n"), "no model name")
	require.Empty(t, cpuNameOf(""))
}

// bench-targets holds each bandwidth run's CPU a GiB against TCP's from
// the same run; a run that lacks either figure is left out, not counted
// as free.
func TestCPUPerGiBRatiosComeFromEachRun(t *testing.T) {
	runs := [][]point{
		{{Test: "stream_bw", Provider: "udp", CPUPerGiB: 0.9}, {Test: "stream_bw", Provider: "tcp", CPUPerGiB: 0.3}},
		{{Test: "stream_bw", Provider: "udp", CPUPerGiB: 0.8}, {Test: "stream_bw", Provider: "tcp"}},
		{{Test: "stream_bw", Provider: "udp", CPUPerGiB: 0.5}, {Test: "stream_bw", Provider: "tcp", CPUPerGiB: 0.25}},
		{},
	}
	ratios, ours, tcps := cpuPerGiB(runs)
	require.Len(t, ratios, 2)
	require.InDelta(t, 3.0, ratios[0], 1e-9)
	require.InDelta(t, 2.0, ratios[1], 1e-9)
	require.Equal(t, []string{"0.90", "0.50"}, ours)
	require.Equal(t, []string{"0.30", "0.25"}, tcps)
}
