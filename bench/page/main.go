package main

import (
	"cmp"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"
)

// point is one vroce-perf or quic-perf result line.
type point struct {
	Tool       string  `json:"tool"` // which command measured it
	Test       string  `json:"test"`
	Provider   string  `json:"provider"`
	Bytes      int     `json:"bytes"`
	BWAvg      float64 `json:"bw_avg_mibps"`
	LatTypical float64 `json:"lat_typical_us"`
	LatP99     float64 `json:"lat_p99_us"`
	MsgRate    float64 `json:"msg_rate_mpps"`
	CPUPerGiB  float64 `json:"cpu_s_per_gib"`
	// DeviceOpenMs: how long the client's device took to open (plugin
	// runs: the plugin's launch with it).
	DeviceOpenMs float64 `json:"device_open_ms,omitempty"`
	Version      string  `json:"version,omitempty"` // quic-perf: quic-go's
	Link         string  `json:"link,omitempty"`    // where it ran (link.name)
	Loss         int     `json:"loss_pct,omitempty"`
	// Via is the provider both ends of the run used when it was not the
	// default (plugin:udp): its TCP figure is that run's.
	Via string `json:"via,omitempty"`
	// StealMs is the CPU time the hypervisor took from this machine's
	// CPUs during the run (vRoCE's and TCP's together): minutes with
	// steal slow a user-space receiver far more than the kernel's.
	StealMs float64 `json:"steal_ms,omitempty"`
}

// The tools a point may come from.
const (
	vrocePerf = "vroce-perf"
	quicPerf  = "quic-perf"
)

// series is one line of a plot.
type series struct {
	name   string
	color  string
	points [][2]float64 // size, value
}

func main() {
	perf := flag.String("perf", "bin/vroce-perf", "the vroce-perf binary")
	quic := flag.String("quic", "", "the quic-perf binary: the stream workloads over quic-go too (loopback)")
	out := flag.String("out", "bench", "where to write the page")
	runs := flag.Int("runs", 3, "runs per point; the one with the median ratio is kept")
	targetsOnly := flag.Bool("targets", false, "measure the targets instead of writing the page")
	loopbackOnly := flag.Bool("loopback-only", false, "measure on loopback alone (no root needed)")
	pluginOnly := flag.Bool("plugin", false, "measure plugin:udp against the udp provider in process instead of writing the page")
	flag.Parse()
	var links []*link
	if !*loopbackOnly {
		if os.Geteuid() != 0 {
			fmt.Fprintln(os.Stderr, "page: the benchmark of record runs between two network namespaces, which needs root; run as root, or pass -loopback-only")
			os.Exit(1)
		}
		for _, mtu := range []int{1500, 9000} {
			l, err := vethLink(mtu)
			if err != nil {
				fmt.Fprintln(os.Stderr, "page:", err)
				os.Exit(1)
			}
			defer l.close()
			links = append(links, l)
		}
	}
	if *pluginOnly {
		if err := runPlugin(os.Stdout, *perf, *runs, links); err != nil {
			fmt.Fprintln(os.Stderr, "page:", err)
			os.Exit(1)
		}
		return
	}
	if *targetsOnly {
		if err := runTargets(os.Stdout, *perf, *runs, links); err != nil {
			fmt.Fprintln(os.Stderr, "page:", err)
			os.Exit(1)
		}
		return
	}
	var all []point
	run := func(l *link, test string, size, iters int) {
		sized := []string{"-s", fmt.Sprint(size), "-n", fmt.Sprint(iters)}
		pts, err := measure(l, *perf, *runs, test, sized)
		if err != nil {
			fmt.Fprintln(os.Stderr, "page:", err)
			os.Exit(1)
		}
		all = append(all, medianRun(pts)...)
		if *quic != "" && l == loopbackLink && strings.HasPrefix(test, "stream_") {
			all = append(all, medianRun(measureQuic(*quic, *runs, append([]string{test, "--json"}, sized...)))...)
		}
		fmt.Fprintf(os.Stderr, "page: %s %s -s %d done\n", l.name, test, size)
	}
	for _, l := range links {
		// Everything between the namespaces runs with a CPU for each end,
		// as two hosts have, both transports alike (placement says why it
		// is pinned at all). Unpinned, a bandwidth row's ratio moved by
		// up to a factor of two between two pages made minutes apart, as
		// the scheduler placed each run's processes: write_bw 64 KiB at
		// MTU 1500 0.42x and 0.53x, stream_bw 1 MiB 0.25x and 0.31x.
		l.pin = twoCPUs()
		for _, test := range []string{"write_bw", "stream_bw"} {
			for _, s := range []int{4 << 10, 64 << 10, 1 << 20} {
				run(l, test, s, max(200, (512<<20)/s))
			}
		}
		for _, test := range []string{"send_lat", "stream_lat"} {
			for _, s := range []int{64, 4 << 10, 64 << 10} {
				run(l, test, s, 3000)
			}
		}
		// The same link through a provider out of process (issue 22):
		// each plugin shares its host's CPU.
		l.provider = pluginProvider
		run(l, "write_bw", 64<<10, 8192)
		run(l, "stream_bw", 64<<10, 8192)
		run(l, "send_lat", 64, 3000)
		l.pin, l.provider = nil, ""
	}
	for _, test := range []string{"write_bw", "stream_bw"} {
		for _, s := range []int{1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20} {
			run(loopbackLink, test, s, max(200, (256<<20)/s))
		}
	}
	for _, test := range []string{"send_lat", "stream_lat"} {
		for _, s := range []int{64, 1 << 10, 4 << 10, 16 << 10, 64 << 10} {
			run(loopbackLink, test, s, 2000)
		}
	}
	if err := write(*out, all); err != nil {
		fmt.Fprintln(os.Stderr, "page:", err)
		os.Exit(1)
	}
}

// measure runs test over l runs times and returns each run's results:
// vRoCE's figure, then TCP's.
func measure(l *link, perf string, runs int, test string, args []string) ([][]point, error) {
	var pairs [][]point
	for range max(runs, 1) {
		before := stolen()
		pts, err := l.run(perf, test, args)
		if err != nil {
			return nil, err
		}
		steal := (stolen() - before).Seconds() * 1000
		for i := range pts {
			pts[i].Tool, pts[i].Link, pts[i].Loss, pts[i].Via = vrocePerf, l.name, l.loss, l.provider
			pts[i].StealMs = steal
		}
		pairs = append(pairs, pts)
	}
	return pairs, nil
}

// measureQuic runs quic-perf with args runs times, in one process on
// loopback, its own TCP run beside each.
func measureQuic(quic string, runs int, args []string) [][]point {
	var pairs [][]point
	for range max(runs, 1) {
		pts, err := runTool(exec.Command(quic, args...))
		if err != nil {
			fmt.Fprintln(os.Stderr, "page:", err)
			os.Exit(1)
		}
		for i := range pts {
			pts[i].Tool, pts[i].Link = quicPerf, loopbackLink.name
		}
		pairs = append(pairs, pts)
	}
	return pairs
}

// target is a goal: a ratio against kernel TCP in the same run, or,
// under loss, against the same workload without loss.
type target struct {
	name, test string
	args       []string
	goal       float64
	loss       int // percent dropped each way: the goal is goodput under it over goodput without
}

// linkTargets are the goals between two namespaces (issue 20), at each
// MTU.
var linkTargets = []target{
	{"stream_lat 64 B: vRoCE/TCP typical latency", "stream_lat", []string{"-s", "64", "-n", "5000"}, 1.25, 0},
	{"send_lat 64 B: vRoCE/TCP typical latency", "send_lat", []string{"-s", "64", "-n", "5000"}, 1.25, 0},
	{"stream_bw 64 KiB: vRoCE/TCP bandwidth", "stream_bw", []string{"-s", "65536", "-n", "4000"}, 1.0, 0},
	{"write_bw 64 KiB: vRoCE/TCP bandwidth", "write_bw", []string{"-s", "65536", "-n", "4000"}, 1.0, 0},
}

// A placement is where the two ends of a run execute. A 64-byte
// ping-pong's round trip is mostly the two wake-ups of the process that
// waits, and a wake-up on the waker's own CPU is a context switch, while
// one on the other CPU is an interrupt to a vCPU that may be halted:
// here 10-14 us against 28-48 us each way (half a round trip), for
// kernel TCP and vRoCE alike. Bandwidth moves as much: kernel TCP's stream at MTU 1500 ran
// at 2,500-3,200 MiB/s with a CPU each end, 1,180-1,340 on one CPU, and
// anywhere from 830 to 1,610 left to the scheduler, which moved the two
// transports of one run differently. So each target runs once per
// placement, both transports pinned the same way. "Two CPUs" is the
// closer model of two hosts.
type placement struct {
	name string
	cpus [2]int // the server's CPU and the client's
}

// pinnings are the placements each target runs in: every one this
// machine has, or the scheduler's (nil) where it has none.
func pinnings() []*placement {
	ps := placements()
	if len(ps) == 0 {
		return []*placement{nil}
	}
	out := make([]*placement, len(ps))
	for i := range ps {
		out[i] = &ps[i]
	}
	return out
}

// twoCPUs is the placement with a CPU each end, nil where there is none.
func twoCPUs() *placement {
	if ps := placements(); len(ps) == 2 {
		return &ps[1]
	}
	return nil
}

// lossTargets are the goals under random loss, at MTU 1500: goodput kept
// against the lossless run, every byte verified. A run moves 750 MiB
// (3-4 s here): with 250 MiB (about a second) one run's ratio ranged
// 0.54-1.27, the loss's own variance and the host's noise over a second.
var lossTargets = []target{
	{"write_bw 64 KiB, 1% loss each way: of lossless goodput", "write_bw", lossArgs, 0.9, 1},
	{"write_bw 64 KiB, 5% loss each way: of lossless goodput", "write_bw", lossArgs, 0.8, 5},
	{"stream_bw 64 KiB, 1% loss each way: of lossless goodput", "stream_bw", lossArgs, 0.9, 1},
	{"stream_bw 64 KiB, 5% loss each way: of lossless goodput", "stream_bw", lossArgs, 0.8, 5},
}

var lossArgs = []string{"-s", "65536", "-n", "12000", "--verify"}

// runTargets measures every target runs times and reports to w, as it
// goes, each run's figure and the median against the goal. Loss runs
// alternate with lossless ones, so that both see the same machine; they
// run on the first link, MTU 1500.
func runTargets(w io.Writer, perf string, runs int, links []*link) error {
	for _, l := range links {
		for _, t := range linkTargets {
			for _, p := range pinnings() {
				if err := l.pinned(p, func() error { return runTarget(w, l, perf, runs, t) }); err != nil {
					return err
				}
			}
		}
	}
	if len(links) > 0 {
		// Random loss is of datagrams: a veth would carry a GSO burst of
		// up to 64 packets whole, and a rule dropping 5% of bursts drops
		// runs of packets, which no wire's random loss does. The lossless
		// runs they are held against carry segments too.
		l := links[0]
		if err := l.pair.SegmentsOnly(true); err != nil {
			return err
		}
		defer l.pair.SegmentsOnly(false)
		// Both runs carry the rule that draws for each datagram; the
		// clean one's drops none (nspair.Pair.DropUDP says why).
		defer l.noLoss()
		for _, t := range lossTargets {
			for _, p := range pinnings() {
				if err := l.pinned(p, func() error { return runLossTarget(w, l, perf, runs, t) }); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// runLossTarget measures t's workload runs times without loss and with
// it, in turn, and writes the ratios and their median against the goal.
func runLossTarget(w io.Writer, l *link, perf string, runs int, t target) error {
	var figures []float64
	var steal []string
	for range max(runs, 1) {
		if err := l.setLoss(0); err != nil {
			return err
		}
		clean, err := measure(l, perf, 1, t.test, t.args)
		if err != nil {
			return err
		}
		if err := l.setLoss(t.loss); err != nil {
			return err
		}
		lossy, err := measure(l, perf, 1, t.test, t.args)
		if err != nil {
			return err
		}
		c, _ := byProvider(clean[0], t.test)
		v, _ := byProvider(lossy[0], t.test)
		if len(c) > 0 && len(v) > 0 && c[0].BWAvg > 0 {
			figures = append(figures, v[0].BWAvg/c[0].BWAvg)
			steal = append(steal, fmt.Sprintf("%.0f+%.0f", c[0].StealMs, v[0].StealMs))
		}
	}
	verdict(w, l.title()+": "+t.name, figures, t.goal, false)
	fmt.Fprintf(w, "  stolen by the hypervisor (lossless run + lossy run) %s ms\n", strings.Join(steal, " "))
	return nil
}

// runTarget measures t over l runs times and writes each run's ratio,
// their median against the goal, and both transports' own figures.
func runTarget(w io.Writer, l *link, perf string, runs int, t target) error {
	pts, err := measure(l, perf, runs, t.test, t.args)
	if err != nil {
		return err
	}
	var figures []float64
	var ours, tcps, steal []string
	for _, run := range pts {
		if v, k, ok := figuresOf(run); ok {
			figures = append(figures, v/k)
			ours, tcps = append(ours, fmt.Sprintf("%.1f", v)), append(tcps, fmt.Sprintf("%.1f", k))
			steal = append(steal, fmt.Sprintf("%.0f", run[0].StealMs))
		}
	}
	verdict(w, l.title()+": "+t.name, figures, t.goal, isLatency(t.test))
	unit := "MiB/s"
	if isLatency(t.test) {
		unit = "us"
	}
	// The ratios alone hide which side moved: TCP's own figures here
	// move 2x between runs.
	fmt.Fprintf(w, "  vRoCE %s, TCP %s (%s); stolen by the hypervisor %s ms\n", strings.Join(ours, " "), strings.Join(tcps, " "), unit, strings.Join(steal, " "))
	if !isLatency(t.test) {
		// The other bandwidth target: CPU seconds a GiB at most
		// TCP's.
		what, _, _ := strings.Cut(t.name, ":")
		cpu, ours, tcps := cpuPerGiB(pts)
		verdict(w, l.title()+": "+what+": vRoCE/TCP CPU seconds a GiB, the sender's", cpu, 1, true)
		fmt.Fprintf(w, "  vRoCE %s, TCP %s (s/GiB)\n", strings.Join(ours, " "), strings.Join(tcps, " "))
	}
	return nil
}

// cpuPerGiB is each bandwidth run's CPU seconds a GiB, vRoCE's over
// TCP's, and both figures: vroce-perf's client measures its own
// process, the sender of a _bw test. A run lacking either is left out.
func cpuPerGiB(pts [][]point) (ratios []float64, ours, tcps []string) {
	for _, run := range pts {
		v, k, ok := pointsOf(run)
		if !ok || v.CPUPerGiB <= 0 || k.CPUPerGiB <= 0 {
			continue
		}
		ratios = append(ratios, v.CPUPerGiB/k.CPUPerGiB)
		ours, tcps = append(ours, fmt.Sprintf("%.2f", v.CPUPerGiB)), append(tcps, fmt.Sprintf("%.2f", k.CPUPerGiB))
	}
	return ratios, ours, tcps
}

// verdict writes a target's runs and their median against the goal.
func verdict(b io.Writer, name string, figures []float64, goal float64, atMost bool) {
	if len(figures) == 0 {
		fmt.Fprintf(b, "%s: no results\n", name)
		return
	}
	runs := make([]string, len(figures))
	for j, f := range figures {
		runs[j] = fmt.Sprintf("%.2f", f)
	}
	sorted := slices.Sorted(slices.Values(figures))
	median := sorted[(len(sorted)-1)/2]
	want, met := fmt.Sprintf(">= %.2f", goal), median >= goal
	if atMost {
		want, met = fmt.Sprintf("<= %.2f", goal), median <= goal
	}
	v := "not met"
	if met {
		v = "met"
	}
	fmt.Fprintf(b, "%s\n  runs %s (spread %.2f-%.2f)\n  median %.2f, target %s: %s\n", name, strings.Join(runs, " "), sorted[0], sorted[len(sorted)-1], median, want, v)
}

// ratio is one run's vRoCE figure over TCP's, latency or bandwidth as the
// test measures; NaN when the run lacks one of them.
func ratio(run []point) float64 {
	v, k, ok := figuresOf(run)
	if !ok {
		return math.NaN()
	}
	return v / k
}

// figuresOf is one run's vRoCE figure and TCP's; false when the run
// lacks one of them.
func figuresOf(run []point) (vroce, tcp float64, ok bool) {
	v, k, ok := pointsOf(run)
	return v.figure(), k.figure(), ok
}

// pointsOf is one run's vRoCE result and TCP's; false when the run lacks
// one of them.
func pointsOf(run []point) (vroce, tcp point, ok bool) {
	if len(run) == 0 {
		return point{}, point{}, false
	}
	v, k := byProvider(run, run[0].Test)
	if len(v) == 0 || len(k) == 0 {
		return point{}, point{}, false
	}
	return v[0], k[0], true
}

// isLatency reports whether test measures latency, not bandwidth.
func isLatency(test string) bool { return strings.HasSuffix(test, "_lat") }

// figure is what p's test measures: its typical latency or its average
// bandwidth.
func (p point) figure() float64 {
	if isLatency(p.Test) {
		return p.LatTypical
	}
	return p.BWAvg
}

// medianRun returns the run, of several of one point, whose vRoCE/TCP
// ratio is the median (the lower middle of an even count).
func medianRun(runs [][]point) []point {
	sorted := slices.Clone(runs)
	sorted = slices.DeleteFunc(sorted, func(r []point) bool { return len(r) == 0 || math.IsNaN(ratio(r)) })
	if len(sorted) == 0 {
		return nil
	}
	slices.SortStableFunc(sorted, func(a, b []point) int { return cmp.Compare(ratio(a), ratio(b)) })
	return sorted[(len(sorted)-1)/2]
}

func pick(all []point, test, provider string, value func(point) float64) series {
	var s series
	for _, p := range all {
		if p.Test == test && p.Provider == provider {
			s.points = append(s.points, [2]float64{float64(p.Bytes), value(p)})
		}
	}
	return s
}

func write(dir string, all []point) error {
	bw := func(p point) float64 { return p.BWAvg }
	lat := func(p point) float64 { return p.LatTypical }
	named := func(s series, name, color string) series { s.name, s.color = name, color; return s }
	plotted := recordLink(all)
	vp := slices.DeleteFunc(byTool(all, vrocePerf), func(p point) bool { return p.where() != plotted })
	qp := byTool(all, quicPerf)
	if plotted != loopbackLink.name {
		qp = nil // quic-perf runs on loopback only
	}
	tput := []series{
		named(pick(vp, "write_bw", "udp", bw), "verbs RDMA WRITE over vRoCE", "#1f77b4"),
		named(pick(vp, "write_bw", "tcp", bw), "same workload, kernel TCP", "#aec7e8"),
		named(pick(vp, "stream_bw", "udp", bw), "rsock stream over vRoCE", "#d62728"),
		named(pick(vp, "stream_bw", "tcp", bw), "same workload, kernel TCP", "#ff9896"),
	}
	lats := []series{
		named(pick(vp, "send_lat", "udp", lat), "verbs SEND ping-pong over vRoCE", "#1f77b4"),
		named(pick(vp, "send_lat", "tcp", lat), "same workload, kernel TCP", "#aec7e8"),
		named(pick(vp, "stream_lat", "udp", lat), "rsock stream ping-pong over vRoCE", "#d62728"),
		named(pick(vp, "stream_lat", "tcp", lat), "same workload, kernel TCP", "#ff9896"),
	}
	if s := pick(qp, "stream_bw", "quic", bw); len(s.points) > 0 {
		tput = append(tput, named(s, "same stream workload, one quic-go stream", "#2ca02c"))
	}
	if s := pick(qp, "stream_lat", "quic", lat); len(s.points) > 0 {
		lats = append(lats, named(s, "same stream ping-pong, one quic-go stream", "#2ca02c"))
	}
	if err := os.WriteFile(filepath.Join(dir, "throughput.svg"), []byte(svg("Throughput against message size ("+linkTitle(plotted)+")", "MiB/s", tput)), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "latency.svg"), []byte(svg("Half round trip against message size ("+linkTitle(plotted)+", typical)", "µs", lats)), 0o644); err != nil {
		return err
	}
	raw, _ := json.MarshalIndent(all, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "results.json"), raw, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "README.md"), []byte(page(all)), 0o644)
}

// where is the link p was measured on; results without one are from
// loopback, the only link there once was.
func (p point) where() string {
	if p.Link == "" {
		return loopbackLink.name
	}
	return p.Link
}

// recordLink is the link the plots show: the benchmark of record (two
// namespaces over veth at MTU 1500) when it ran, else loopback.
func recordLink(all []point) string {
	for _, p := range all {
		if p.Link == "veth1500" {
			return p.Link
		}
	}
	return loopbackLink.name
}

// linkTitle says in words where a link's figures were measured.
func linkTitle(name string) string {
	if mtu, ok := strings.CutPrefix(name, "veth"); ok {
		return "two processes, two network namespaces, veth MTU " + mtu
	}
	return "one process, loopback"
}

// page is the results page: how it was made, then for each link a table
// per workload with the ratio to TCP, and for the streams on loopback
// quic-go's beside it.
func page(all []point) string {
	var b strings.Builder
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	cpus := fmt.Sprintf("%d CPUs", runtime.NumCPU())
	if name := cpuName(); name != "" {
		cpus += " (" + name + ")"
	}
	fmt.Fprintf(&b, "# vRoCE against kernel TCP\n\nMade by `make bench-page` on %s: %s, %s, Linux %s, the UDP provider (GSO/GRO). Each vRoCE figure and its TCP figure come from one `vroce-perf ... --compare tcp` run, seconds apart; of three such runs per row, the one with the median ratio is shown. Absolute numbers are noise on a shared machine, the ratios less so.\n\n",
		time.Now().UTC().Format("2006-01-02"), runtime.Version(), cpus, strings.TrimSpace(string(kernel)))
	b.WriteString("**The benchmark of record runs between two processes in two network namespaces joined by a veth pair**, at MTU 1500 and 9000: server in one namespace, client in the other, kernel TCP over the same veth in the same run. One process on loopback, with its 32 KiB packets, comes last as a secondary view. Between the namespaces every row runs with the server and the client pinned to a CPU each (taskset), both transports alike, the closer model of two hosts: each half of a small message's round trip here is mostly one wake-up, 10-14 µs when both ends share a CPU and 28-48 µs across two, and left to the scheduler one run's two transports were often placed differently (a bandwidth row's ratio moved by up to a factor of two between pages). `make bench-targets` measures both placements.\n\n")
	vp, qp := byTool(all, vrocePerf), byTool(all, quicPerf)
	inProcess := func(p point) bool { return p.Via == "" }
	plugged := slices.DeleteFunc(slices.Clone(vp), inProcess)
	vp = slices.DeleteFunc(vp, func(p point) bool { return !inProcess(p) })
	if len(qp) > 0 {
		fmt.Fprintf(&b, "On loopback the stream workloads also ran over one stream of quic-go %s, the other user-space transport over UDP, with `quic-perf` (bench/quic): the same client and server, both in one process, and a kernel TCP run of its own beside each; the quic-go / TCP ratio is against that run's TCP figure.\n\n", qp[0].Version)
	}
	b.WriteString("![throughput](throughput.svg)\n\n![latency](latency.svg)\n\n")
	for _, name := range []string{"veth1500", "veth9000", loopbackLink.name} {
		on := func(pts []point) []point {
			return slices.DeleteFunc(slices.Clone(pts), func(p point) bool { return p.where() != name })
		}
		lv, lq := on(vp), on(qp)
		if len(lv) == 0 {
			continue
		}
		fmt.Fprintf(&b, "# %s\n\n", linkTitle(name))
		tables(&b, lv, lq)
		pluginTable(&b, lv, on(plugged))
	}
	b.WriteString("Raw results: `results.json`.\n")
	return b.String()
}

// tables writes a table per workload of one link's points.
func tables(b *strings.Builder, vp, qp []point) {
	cpu := func(p point) string {
		if p.CPUPerGiB == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f", p.CPUPerGiB)
	}
	for _, t := range []struct{ test, title, unit string }{
		{"write_bw", "Verbs RDMA WRITE bandwidth", "MiB/s"}, {"stream_bw", "rsock stream bandwidth", "MiB/s"},
		{"send_lat", "Verbs SEND latency (half round trip, typical)", "µs"}, {"stream_lat", "rsock stream latency (half round trip, typical)", "µs"},
	} {
		// Latency runs measure no CPU per GiB, so their tables leave it out.
		bandwidth := !isLatency(t.test)
		v, k := byProvider(vp, t.test)
		if len(v) == 0 {
			continue
		}
		q, qk := byProvider(qp, t.test)
		head := []string{"bytes", "vRoCE (" + t.unit + ")", "TCP (" + t.unit + ")", "vRoCE / TCP"}
		if bandwidth {
			head = append(head, "CPU s/GiB vRoCE", "CPU s/GiB TCP")
		}
		if len(q) > 0 {
			head = append(head, "quic-go ("+t.unit+")", "quic-go / TCP")
			if bandwidth {
				head = append(head, "CPU s/GiB quic-go")
			}
		}
		fmt.Fprintf(b, "## %s\n\n", t.title)
		row(b, head...)
		row(b, slices.Repeat([]string{"---"}, len(head))...)
		for i := range min(len(v), len(k)) {
			cells := []string{fmt.Sprint(v[i].Bytes), fmt.Sprintf("%.1f", v[i].figure()), fmt.Sprintf("%.1f", k[i].figure()), fmt.Sprintf("%.2fx", v[i].figure()/k[i].figure())}
			if bandwidth {
				cells = append(cells, cpu(v[i]), cpu(k[i]))
			}
			if len(q) > 0 {
				quic := []string{"-", "-", "-"}
				if j := slices.IndexFunc(q, func(p point) bool { return p.Bytes == v[i].Bytes }); j >= 0 && j < len(qk) {
					quic = []string{fmt.Sprintf("%.1f", q[j].figure()), fmt.Sprintf("%.2fx", q[j].figure()/qk[j].figure()), cpu(q[j])}
				}
				if !bandwidth {
					quic = quic[:2]
				}
				cells = append(cells, quic...)
			}
			row(b, cells...)
		}
		b.WriteString("\n")
	}
}

// row writes one Markdown table row.
func row(b *strings.Builder, cells ...string) {
	b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
}

// byTool is the points one tool measured.
func byTool(all []point, tool string) []point {
	return slices.DeleteFunc(slices.Clone(all), func(p point) bool { return p.Tool != tool })
}

func byProvider(all []point, test string) (vroce, tcp []point) {
	for _, p := range all {
		if p.Test != test {
			continue
		}
		if p.Provider == "tcp" {
			tcp = append(tcp, p)
		} else {
			vroce = append(vroce, p)
		}
	}
	return vroce, tcp
}

// svg draws series on a log2 x axis (bytes) and a linear y axis.
func svg(title, unit string, ss []series) string {
	const w, h, left, right, top, bottom = 760.0, 460.0, 70.0, 20.0, 40.0, 140.0 // room below for five legend lines
	xmin, xmax, ymax := math.Inf(1), math.Inf(-1), 0.0
	for _, s := range ss {
		for _, p := range s.points {
			xmin, xmax, ymax = math.Min(xmin, p[0]), math.Max(xmax, p[0]), math.Max(ymax, p[1])
		}
	}
	if math.IsInf(xmin, 0) || ymax == 0 {
		return `<svg xmlns="http://www.w3.org/2000/svg"/>`
	}
	ymax *= 1.1
	x := func(v float64) float64 {
		if xmax == xmin {
			return left
		}
		return left + (math.Log2(v)-math.Log2(xmin))/(math.Log2(xmax)-math.Log2(xmin))*(w-left-right)
	}
	y := func(v float64) float64 { return h - bottom - v/ymax*(h-top-bottom) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="12">`+"\n", w, h)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/><text x="%.0f" y="22" font-size="15">%s</text>`+"\n", left, title)
	fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="black"/><line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="black"/>`+"\n",
		left, h-bottom, w-right, h-bottom, left, top, left, h-bottom)
	for i := 0; i <= 4; i++ {
		v := ymax * float64(i) / 4
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="end">%.0f</text><line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="#ddd"/>`+"\n",
			left-6, y(v)+4, v, left, y(v), w-right, y(v))
	}
	fmt.Fprintf(&b, `<text x="14" y="%.0f" transform="rotate(-90 14 %.0f)" text-anchor="middle">%s</text>`+"\n", (top+h-bottom)/2, (top+h-bottom)/2, unit)
	for v := xmin; v <= xmax; v *= 4 {
		label := fmt.Sprintf("%.0f", v)
		if v >= 1024 {
			label = fmt.Sprintf("%.0fK", v/1024)
		}
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="middle">%s</text>`+"\n", x(v), h-bottom+16, label)
	}
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="middle">message size (bytes)</text>`+"\n", (left+w-right)/2, h-bottom+34)
	for i, s := range ss {
		var pts []string
		for _, p := range s.points {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(p[0]), y(p[1])))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", s.color, strings.Join(pts, " "))
		for _, p := range s.points {
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", x(p[0]), y(p[1]), s.color)
		}
		ly := h - bottom + 52 + float64(i)*16
		fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="%s" stroke-width="3"/><text x="%.0f" y="%.0f">%s</text>`+"\n",
			left, ly-4, left+24, ly-4, s.color, left+32, ly, s.name)
	}
	b.WriteString("</svg>\n")
	return b.String()
}
