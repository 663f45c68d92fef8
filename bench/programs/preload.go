package main

// The -preload measurement (make bench-preload): unmodified programs under
// vroce-run, both ends interposed, beside the same programs through the
// rsock-proxy pair, the TCP proxy chain, and vroce-perf's own streams
// between the same two places, in one run, against issue 23's targets.

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"vroce.dev/bench/internal/nspair"
)

// preloadRun is what -preload needs besides the proxy.
type preloadRun struct {
	proxy, vroceRun, perf string
	link                  string
	runs                  int
	dur                   time.Duration
	requests              int
}

// row is one workload's figures: each chain's values over the runs.
type row struct {
	name, unit string
	values     map[string][]float64 // by chain name
}

func (r *row) add(chain string, v float64) {
	if r.values == nil {
		r.values = map[string][]float64{}
	}
	r.values[chain] = append(r.values[chain], v)
}

// ratios are a[i]/b[i] over the runs, sorted.
func (r *row) ratios(a, b string) []float64 {
	var out []float64
	for i := range min(len(r.values[a]), len(r.values[b])) {
		out = append(out, r.values[a][i]/r.values[b][i])
	}
	slices.Sort(out)
	return out
}

func runPreload(pr preloadRun) error {
	for _, bin := range []string{pr.proxy, pr.vroceRun, pr.perf} {
		if _, err := os.Stat(bin); err != nil {
			return fmt.Errorf("%s: %v (make build)", bin, err)
		}
	}
	if err := checkTools(); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	st, dir, cleanup, err := newSite(pr.link)
	if err != nil {
		return err
	}
	defer cleanup()
	var procs procSet
	defer procs.stop()

	plain, err := startServers(&procs, st, self, filepath.Join(dir, "plain"))
	if err != nil {
		return err
	}
	interposed, err := startServers(&procs, st, self, filepath.Join(dir, "interposed"), pr.vroceRun, "--")
	if err != nil {
		return err
	}
	chains := map[string]*chain{}
	for _, kind := range []string{"vroce", "tcp"} {
		c, err := startChain(&procs, st, pr.proxy, kind, plain)
		if err != nil {
			return err
		}
		chains[kind] = c
	}
	// The clients under vroce-run go straight to the interposed servers;
	// --no-fallback fails a connection that could not use vRoCE instead
	// of measuring it over TCP.
	for name, mode := range map[string]string{"preload": "socket", "preload-cm": "cm"} {
		chains[name] = &chain{kind: name, st: st, ns: st.cliNS, redis: interposed.redis, iperf: interposed.iperf, nginx: interposed.nginx,
			wrap: []string{pr.vroceRun, "--mode", mode, "--no-fallback", "--"}}
	}
	for _, name := range []string{"vroce", "tcp", "preload", "preload-cm"} {
		srv := plain
		if strings.HasPrefix(name, "preload") {
			srv = interposed
		}
		if err := chains[name].check(srv); err != nil {
			return fmt.Errorf("%s chain: data check: %w", name, err)
		}
	}

	iperfRow := &row{name: "iperf3, one stream", unit: "Gbit/s"}
	setRow := &row{name: "redis-benchmark SET, 32 clients, -P 8", unit: "requests/s"}
	getRow := &row{name: "redis-benchmark GET, 32 clients, -P 8", unit: "requests/s"}
	pingRow := &row{name: "redis-benchmark PING, -c 1 -P 1, p50 round trip", unit: "µs"}
	closeRow := &row{name: "nginx + wrk, Connection: close, 32 connections", unit: "requests/s"}
	for range pr.runs {
		for _, name := range []string{"preload", "vroce", "tcp"} {
			c := chains[name]
			v, err := iperf(c, pr.dur)
			if err != nil {
				return fmt.Errorf("iperf3 over the %s chain: %w", name, err)
			}
			iperfRow.add(name, v)
			for _, x := range []struct {
				r    *row
				test string
			}{{setRow, "set"}, {getRow, "get"}} {
				v, err := redisBench(c, x.test, pr.requests, 8)
				if err != nil {
					return fmt.Errorf("redis %s over the %s chain: %w", x.test, name, err)
				}
				x.r.add(name, v)
			}
			p50, err := redisPing(c)
			if err != nil {
				return fmt.Errorf("redis PING over the %s chain: %w", name, err)
			}
			pingRow.add(name, p50)
		}
		for _, name := range []string{"preload-cm", "preload", "vroce", "tcp"} {
			v, err := wrkClose(chains[name], 32, pr.dur)
			if err != nil {
				return fmt.Errorf("wrk with Connection: close over the %s chain: %w", name, err)
			}
			closeRow.add(name, v)
		}
		bw, err := perfDirect(&procs, st, pr.perf, "stream_bw", 1<<20, 2000)
		if err != nil {
			return err
		}
		iperfRow.add("direct", bw.BWAvgMiBps*8*(1<<20)/1e9)
		lat, err := perfDirect(&procs, st, pr.perf, "stream_lat", 64, 20000)
		if err != nil {
			return err
		}
		pingRow.add("direct", 2*lat.LatTypicalUs) // vroce-perf reports half the round trip
	}

	fmt.Printf("Unmodified programs under vroce-run, both ends interposed, %s, beside the same programs through two rsock-proxys (vRoCE between them, and kernel TCP), and vroce-perf's rsock streams between the same two places (%d runs, taking turns).\n\n", st.describe(), pr.runs)
	fmt.Println("| workload | vroce-run | rsock-proxy pair | TCP proxy chain | vroce-perf direct |")
	fmt.Println("|---|---|---|---|---|")
	cell := func(r *row, chain string) string {
		if len(r.values[chain]) == 0 {
			return "-"
		}
		v := slices.Sorted(slices.Values(r.values[chain]))
		if len(v) == 1 {
			return num(v[0])
		}
		return fmt.Sprintf("%s (%s-%s)", num(median(v)), num(v[0]), num(v[len(v)-1]))
	}
	for _, r := range []*row{iperfRow, setRow, getRow, pingRow} {
		fmt.Printf("| %s, %s | %s | %s | %s | %s |\n", r.name, r.unit, cell(r, "preload"), cell(r, "vroce"), cell(r, "tcp"), cell(r, "direct"))
	}
	fmt.Printf("| %s, %s | %s (RDMA_CM), %s (socket) | %s | %s | - |\n", closeRow.name, closeRow.unit, cell(closeRow, "preload-cm"), cell(closeRow, "preload"), cell(closeRow, "vroce"), cell(closeRow, "tcp"))

	fmt.Println("\nIssue 23's targets (median of the runs; spread in brackets):")
	target := func(what string, got []float64, want string, met bool) {
		verdict := "not met"
		if met {
			verdict = "met"
		}
		fmt.Printf("- %s: %s (%s-%s); target %s: %s\n", what, num(median(got)), num(got[0]), num(got[len(got)-1]), want, verdict)
	}
	r := iperfRow.ratios("preload", "direct")
	target("iperf3 via vroce-run / vroce-perf stream_bw 1 MiB", r, "at least 0.7", median(r) >= 0.7)
	r = iperfRow.ratios("preload", "vroce")
	target("iperf3 via vroce-run / via the rsock-proxy pair", r, "at least 1.2", median(r) >= 1.2)
	for _, x := range []*row{setRow, getRow} {
		r = x.ratios("preload", "vroce")
		target(x.name+" via vroce-run / via the rsock-proxy pair", r, "at least 1.2", median(r) >= 1.2)
	}
	var over []float64 // PING's round trip beyond the stream's own, µs
	for i := range min(len(pingRow.values["preload"]), len(pingRow.values["direct"])) {
		over = append(over, pingRow.values["preload"][i]-pingRow.values["direct"][i])
	}
	slices.Sort(over)
	target("PING p50 via vroce-run minus stream_lat's round trip, µs", over, "at most 6", median(over) <= 6)
	v := slices.Sorted(slices.Values(closeRow.values["preload-cm"]))
	target("wrk Connection: close via vroce-run in RDMA_CM mode, requests/s", v, "at least 3,000", median(v) >= 3000)
	return nil
}

// num prints a figure with three significant digits, or whole when
// larger.
func num(v float64) string {
	if v >= 1000 || v <= -1000 {
		return fmt.Sprintf("%.0f", v)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

// redisPing runs redis-benchmark's PING with one client and no
// pipelining and returns the p50 round trip in µs.
func redisPing(c *chain) (float64, error) {
	host, port, _ := net.SplitHostPort(c.redis)
	out, err := c.command("redis-benchmark", "-h", host, "-p", port, "-t", "ping", "-c", "1", "-P", "1", "-n", "20000", "--csv").CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("redis-benchmark: %v: %s", err, out)
	}
	ms, err := redisCSVField(out, "PING_MBULK", "p50_latency_ms")
	return ms * 1000, err
}

// wrkClose is wrk with a new connection for every request.
func wrkClose(c *chain, conns int, dur time.Duration) (float64, error) {
	out, err := c.command("wrk", "-t", "2", "-c", fmt.Sprint(conns), "-d", fmt.Sprintf("%ds", max(1, int(dur/time.Second))),
		"-H", "Connection: close", "http://"+c.nginx+"/file").CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("wrk: %v: %s", err, out)
	}
	return parseWrk(out)
}

// perfResult is what is read of vroce-perf's --json line.
type perfResult struct {
	Test         string  `json:"test"`
	Provider     string  `json:"provider"`
	BWAvgMiBps   float64 `json:"bw_avg_mibps"`
	LatTypicalUs float64 `json:"lat_typical_us"`
}

// perfDirect runs one vroce-perf stream test, its server beside the
// servers and its client beside the clients.
func perfDirect(ps *procSet, st *site, perf, test string, size, iters int) (perfResult, error) {
	port, err := st.port()
	if err != nil {
		return perfResult{}, err
	}
	args := []string{test, "-s", fmt.Sprint(size), "-n", fmt.Sprint(iters), "--port", fmt.Sprint(port)}
	srv, err := ps.start(st, st.srvNS, perf, args...)
	if err != nil {
		return perfResult{}, err
	}
	defer srv.Wait()
	if err := awaitBound(st.srvNS, port); err != nil {
		return perfResult{}, err
	}
	var stderr strings.Builder
	cmd := st.command(st.cliNS, perf, append(args, "--json", st.srvHost)...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return perfResult{}, fmt.Errorf("vroce-perf %s: %v: %s", test, err, stderr.String())
	}
	for _, line := range strings.Split(string(out), "\n") {
		var r perfResult
		if json.Unmarshal([]byte(line), &r) == nil && r.Test == test {
			return r, nil
		}
	}
	return perfResult{}, fmt.Errorf("vroce-perf %s: no result in %q", test, out)
}

// awaitBound waits until a TCP socket listens on port in ns, without
// connecting to it (vroce-perf's server takes the first connection as
// its client's).
func awaitBound(ns string, port int) error {
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		out, err := nspair.Command(ns, "ss", "-Hltn", fmt.Sprintf("sport = :%d", port)).Output()
		if err == nil && len(strings.TrimSpace(string(out))) > 0 {
			return nil
		}
	}
	return fmt.Errorf("nothing listens on port %d after 10 s", port)
}

// redisCSVField finds a column of test's line in redis-benchmark's --csv
// output, whose first line names the columns.
func redisCSVField(out []byte, test, column string) (float64, error) {
	var cols []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Split(line, ",")
		for i := range f {
			f[i] = strings.Trim(f[i], `"`)
		}
		switch {
		case len(f) > 1 && f[0] == "test":
			cols = f
		case len(f) > 1 && strings.EqualFold(f[0], test):
			if i := slices.Index(cols, column); i > 0 && i < len(f) {
				return strconv.ParseFloat(f[i], 64)
			}
		}
	}
	return 0, fmt.Errorf("redis-benchmark: no %s %s in %q", test, column, out)
}
