package main

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"vroce.dev/bench/internal/nspair"
)

func main() {
	proxy := flag.String("proxy", "bin/rsock-proxy", "the rsock-proxy binary")
	runs := flag.Int("runs", 3, "how many times each chain runs each workload")
	dur := flag.Duration("duration", 4*time.Second, "how long each iperf3, wrk and echo measurement lasts")
	conns := flag.String("wrk-conns", "2,32,200", "wrk connection counts")
	requests := flag.Int("redis-requests", 100000, "requests per redis-benchmark run")
	echoConns := flag.String("echo-conns", "8,200,1000,3000", "connection counts of the 1 KiB echo (cost per request as streams grow)")
	echoScale := flag.String("echo-scale", "200,10000", "connection counts of the 1 KiB echo over the vRoCE chain alone, each against the first (the TCP chain's proxies cannot hold 10,000 here); empty: none")
	linkKind := flag.String("link", "", "veth (two namespaces, root) or loopback; default veth as root")
	echoServer := flag.String("echo-server", "", "internal: serve the echo on this address")
	echoClient := flag.String("echo-client", "", "internal: run the echo load against this address")
	echoN := flag.Int("echo-n", 1, "internal: the echo load's connections")
	preload := flag.Bool("preload", false, "measure issue 23's targets instead: the programs under vroce-run beside the proxy chains and vroce-perf")
	vroceRun := flag.String("vroce-run", "bin/vroce-run", "the vroce-run binary (-preload)")
	perf := flag.String("perf", "bin/vroce-perf", "the vroce-perf binary (-preload)")
	flag.Parse()
	var err error
	switch {
	case *echoServer != "":
		err = serveEcho(*echoServer)
	case *echoClient != "":
		var rate float64
		var setup time.Duration
		if rate, setup, err = echoLoad(*echoClient, *echoN, *dur); err == nil {
			fmt.Println(rate, setup.Seconds())
		}
	case *preload:
		err = runPreload(preloadRun{proxy: *proxy, vroceRun: *vroceRun, perf: *perf, link: *linkKind, runs: *runs, dur: *dur, requests: *requests})
	default:
		err = run(*proxy, *linkKind, *runs, *dur, *conns, *echoConns, *echoScale, *requests)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench/programs:", err)
		os.Exit(1)
	}
}

// site is where the two sides run: the servers and their proxy in srvNS
// on srvHost, the clients and theirs in cliNS on its loopback. Empty
// namespaces are this one.
type site struct {
	srvNS, cliNS string
	srvHost      string
	next         int // the next port, inside fresh namespaces
	// cpus pins each namespace's processes to a CPU of its own, as two
	// hosts of one CPU each, the TCP chain's and vRoCE's alike; empty,
	// the scheduler places them (on one host's loopback, say). Left to
	// it, where each run's processes landed moved a row's ratio as much
	// as anything measured (bench/page's placement).
	cpus map[string]int
}

// command is name run in namespace ns, on its CPU if the site pins it.
func (s *site) command(ns, name string, args ...string) *exec.Cmd {
	if cpu, ok := s.cpus[ns]; ok {
		return nspair.Pinned(cpu, ns, name, args...)
	}
	return nspair.Command(ns, name, args...)
}

// port is a TCP port free on the site's side.
func (s *site) port() (int, error) {
	if s.srvNS == "" {
		return freePort()
	}
	s.next++
	return s.next, nil
}

func (s *site) describe() string {
	if s.srvNS == "" {
		return "on one host's loopback"
	}
	where := "between two network namespaces over a veth pair of MTU 1500 (servers in one, clients in the other"
	if len(s.cpus) > 0 {
		where += fmt.Sprintf("; each side's processes pinned to a CPU of its own, %d and %d, as two one-CPU hosts", s.cpus[s.srvNS], s.cpus[s.cliNS])
	}
	return where + ")"
}

// The programs measured, and the Debian packages they come in.
var tools = map[string]string{
	"redis-server": "redis-server", "redis-benchmark": "redis-tools", "redis-cli": "redis-tools",
	"iperf3": "iperf3", "nginx": "nginx-light", "wrk": "wrk", "curl": "curl",
}

// checkTools says which Debian packages to install for the programs
// missing here.
func checkTools() error {
	var missing []string
	for _, tool := range slices.Sorted(maps.Keys(tools)) {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tools[tool])
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing programs; install them with: apt-get install %s", strings.Join(slices.Compact(slices.Sorted(slices.Values(missing))), " "))
	}
	return nil
}

func run(proxy, linkKind string, runs int, dur time.Duration, connList, echoList, scaleList string, requests int) error {
	if err := checkTools(); err != nil {
		return err
	}
	if _, err := os.Stat(proxy); err != nil {
		return fmt.Errorf("%s: %v (make build)", proxy, err)
	}
	wrkConns, err := counts("-wrk-conns", connList)
	if err != nil {
		return err
	}
	echoConns, err := counts("-echo-conns", echoList)
	if err != nil {
		return err
	}
	var scaleConns []int
	if scaleList != "" {
		if scaleConns, err = counts("-echo-scale", scaleList); err != nil {
			return err
		}
	}

	self, err := os.Executable()
	if err != nil {
		return err
	}
	st, dir, cleanup, err := newSite(linkKind)
	if err != nil {
		return err
	}
	defer cleanup()
	var procs procSet
	defer procs.stop()

	srv, err := startServers(&procs, st, self, dir)
	if err != nil {
		return err
	}
	chains := map[string]*chain{}
	for _, kind := range []string{"vroce", "tcp"} {
		c, err := startChain(&procs, st, proxy, kind, srv)
		if err != nil {
			return err
		}
		if err := c.check(srv); err != nil {
			return fmt.Errorf("%s chain: data check: %w", kind, err)
		}
		chains[kind] = c
	}

	type workload struct {
		name    string
		unit    string
		measure func(c *chain) (float64, error)
	}
	works := []workload{
		{"redis-benchmark SET, 32 clients", "requests/s", func(c *chain) (float64, error) { return redisBench(c, "set", requests, 1) }},
		{"redis-benchmark GET, 32 clients", "requests/s", func(c *chain) (float64, error) { return redisBench(c, "get", requests, 1) }},
		{"iperf3, one stream", "Gbit/s", func(c *chain) (float64, error) { return iperf(c, dur) }},
	}
	for _, n := range wrkConns {
		works = append(works, workload{fmt.Sprintf("nginx + wrk, 64 KiB file, %d connections", n), "requests/s",
			func(c *chain) (float64, error) { return wrk(c, n, dur) }})
	}
	for _, n := range echoConns {
		works = append(works, workload{fmt.Sprintf("1 KiB echo, %d connections", n), "requests/s",
			func(c *chain) (float64, error) { v, _, err := c.echoLoad(self, n, dur); return v, err }})
	}

	fmt.Printf("Unmodified programs through two rsock-proxys %s, against the same chain over kernel TCP (%d runs each, chains taking turns).\n\n", st.describe(), runs)
	fmt.Println("| workload | vRoCE chain (median) | TCP chain (median) | ratio, median | ratio, spread |")
	fmt.Println("|---|---|---|---|---|")
	for _, w := range works {
		var vs, ts, ratios []float64
		for range runs {
			v, err := w.measure(chains["vroce"])
			if err != nil {
				return fmt.Errorf("%s over the vRoCE chain: %w", w.name, err)
			}
			t, err := w.measure(chains["tcp"])
			if err != nil {
				return fmt.Errorf("%s over the TCP chain: %w", w.name, err)
			}
			vs, ts, ratios = append(vs, v), append(ts, t), append(ratios, v/t)
		}
		slices.Sort(ratios)
		fmt.Printf("| %s | %.4g %s | %.4g %s | %.2fx | %.2f-%.2fx |\n", w.name, median(vs), w.unit, median(ts), w.unit,
			median(ratios), ratios[0], ratios[len(ratios)-1])
	}
	return echoScaleTable(chains["vroce"], self, scaleConns, runs, dur)
}

// echoScaleTable measures the 1 KiB echo over the vRoCE chain at each
// count in turn, runs times, and gives each count's rate against the
// first count's in the same run: issue 20's flat cost per request up to
// 10,000 streams is a ratio of 1.
func echoScaleTable(c *chain, self string, conns []int, runs int, dur time.Duration) error {
	if len(conns) < 2 {
		return nil
	}
	rates := make([][]float64, len(conns))
	setups := make([][]float64, len(conns)) // seconds
	for range runs {
		for i, n := range conns {
			v, setup, err := c.echoLoad(self, n, dur)
			if err != nil {
				return fmt.Errorf("1 KiB echo over the vRoCE chain, %d connections: %w", n, err)
			}
			rates[i] = append(rates[i], v)
			setups[i] = append(setups[i], setup.Seconds())
		}
	}
	fmt.Printf("\nThe 1 KiB echo over the vRoCE chain alone as the streams grow (%d runs, counts taking turns), timed once every connection has made its first exchange; a flat cost per request is a ratio of 1. The connections' setup, up to that first exchange, is beside it.\n\n", runs)
	fmt.Printf("| connections | requests/s (median) | against %d, median | spread | all up end to end in (median) |\n|---|---|---|---|---|\n", conns[0])
	for i, n := range conns {
		ratios := make([]float64, runs)
		for r := range runs {
			ratios[r] = rates[i][r] / rates[0][r]
		}
		slices.Sort(ratios)
		fmt.Printf("| %d | %.4g | %.2fx | %.2f-%.2fx | %.2f s |\n", n, median(rates[i]), median(ratios), ratios[0], ratios[len(ratios)-1], median(setups[i]))
	}
	return nil
}

// newSite makes where a run happens (veth: two fresh namespaces) and a
// directory for its files; cleanup removes both.
func newSite(linkKind string) (st *site, dir string, cleanup func(), err error) {
	st = &site{srvHost: "127.0.0.1"}
	var undo []func()
	cleanup = func() {
		for _, f := range slices.Backward(undo) {
			f()
		}
	}
	if linkKind == "" {
		linkKind = "loopback"
		if os.Geteuid() == 0 {
			linkKind = "veth"
		}
	}
	switch linkKind {
	case "veth":
		pair, err := nspair.Make("vroce-prog", "10.79.0", 1500)
		if err != nil {
			return nil, "", nil, err
		}
		undo = append(undo, pair.Close)
		st = &site{srvNS: pair.A, cliNS: pair.B, srvHost: pair.AddrA, next: 21000}
		if cpus := nspair.AllowedCPUs(2); len(cpus) == 2 {
			st.cpus = map[string]int{pair.A: cpus[0], pair.B: cpus[1]}
		}
	case "loopback":
	default:
		return nil, "", nil, fmt.Errorf("-link %q: want veth or loopback", linkKind)
	}
	dir, err = os.MkdirTemp("", "vroce-programs-")
	if err != nil {
		cleanup()
		return nil, "", nil, err
	}
	undo = append(undo, func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil { // nginx's workers may run as another user
		cleanup()
		return nil, "", nil, err
	}
	return st, dir, cleanup, nil
}

// counts parses a flag's list of positive counts.
func counts(name, list string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%s %q: want a list of positive counts", name, list)
		}
		out = append(out, n)
	}
	return out, nil
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// procSet is every process this run started; stop ends them all.
type procSet []*exec.Cmd

func (ps *procSet) start(st *site, ns, name string, args ...string) (*exec.Cmd, error) {
	cmd := st.command(ns, name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	*ps = append(*ps, cmd)
	return cmd, nil
}

func (ps *procSet) stop() {
	for _, cmd := range slices.Backward(*ps) {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(3 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}
}

// freePort is a TCP port on loopback nobody listens on now.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// awaitListening waits until something accepts on addr, seen from ns.
func awaitListening(ns, addr string) error {
	host, port, _ := net.SplitHostPort(addr)
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if ns == "" {
			if c, err := net.Dial("tcp", addr); err == nil {
				c.Close()
				return nil
			}
			continue
		}
		if nspair.Command(ns, "bash", "-c", "exec 3<>/dev/tcp/"+host+"/"+port).Run() == nil {
			return nil
		}
	}
	return fmt.Errorf("nothing listens on %s after 10 s", addr)
}

// servers are the programs' server ends.
type servers struct {
	redis, iperf, nginx, echo string // addresses
	file                      []byte // what nginx serves at /file
}

// startServers starts redis, iperf3 and nginx (and, unwrapped, the echo
// server) in dir, each command prefixed by wrap (vroce-run and its flags,
// or nothing).
func startServers(ps *procSet, st *site, self, dir string, wrap ...string) (*servers, error) {
	var s servers
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	start := func(name string, args ...string) error {
		if len(wrap) > 0 {
			name, args = wrap[0], append(append(slices.Clone(wrap[1:]), name), args...)
		}
		_, err := ps.start(st, st.srvNS, name, args...)
		return err
	}
	ports := make([]int, 4)
	for i := range ports {
		p, err := st.port()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	at := func(port int) string { return net.JoinHostPort(st.srvHost, fmt.Sprint(port)) }
	s.redis, s.iperf, s.nginx, s.echo = at(ports[0]), at(ports[1]), at(ports[2]), at(ports[3])

	if err := start("redis-server", "--port", fmt.Sprint(ports[0]), "--bind", st.srvHost, "--protected-mode", "no", "--save", "", "--appendonly", "no", "--dir", dir); err != nil {
		return nil, err
	}
	if err := start("iperf3", "-s", "-p", fmt.Sprint(ports[1]), "-B", st.srvHost); err != nil {
		return nil, err
	}
	listening := []string{s.redis, s.iperf, s.nginx}
	if len(wrap) == 0 { // a Go program: nothing to interpose
		if _, err := ps.start(st, st.srvNS, self, "-echo-server", s.echo); err != nil {
			return nil, err
		}
		listening = append(listening, s.echo)
	}

	s.file = make([]byte, 64<<10)
	rand.Read(s.file)
	root := filepath.Join(dir, "www")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(root, "file"), s.file, 0o644); err != nil {
		return nil, err
	}
	// Workers of the master's own user: as root they would otherwise
	// become nobody, whom a vroced of root's does not serve.
	user := ""
	if os.Geteuid() == 0 {
		user = "user root;"
	}
	conf := fmt.Sprintf(`daemon off;
%[4]s
master_process on;
worker_processes 2;
pid %[1]s/nginx.pid;
error_log %[1]s/nginx-error.log;
events { worker_connections 4096; use epoll; }
http {
  access_log off;
  sendfile on;
  keepalive_requests 1000000;
  client_body_temp_path %[1]s/body;
  proxy_temp_path %[1]s/proxy;
  fastcgi_temp_path %[1]s/fastcgi;
  uwsgi_temp_path %[1]s/uwsgi;
  scgi_temp_path %[1]s/scgi;
  server { listen %[2]s; root %[3]s; }
}
`, dir, s.nginx, root, user)
	confPath := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	if err := start("nginx", "-c", confPath, "-e", filepath.Join(dir, "nginx-error.log")); err != nil {
		return nil, err
	}
	for _, a := range listening {
		if err := awaitListening(st.srvNS, a); err != nil {
			return nil, err
		}
	}
	return &s, nil
}

// chain is one chain of proxies in front of each server: the addresses
// the clients use, on the loopback of the clients' namespace.
type chain struct {
	kind                      string
	st                        *site
	ns                        string // the clients'
	redis, iperf, nginx, echo string
	wrap                      []string // what runs each client (vroce-run and its flags), if anything
}

// startChain starts, for each server, a server-side proxy (vroce:// or
// tcp:// in, TCP to the server out) beside the servers, and a client-side
// proxy (TCP in, to the server-side proxy out) beside the clients.
func startChain(ps *procSet, st *site, proxy, kind string, srv *servers) (*chain, error) {
	c := &chain{kind: kind, st: st, ns: st.cliNS}
	for _, x := range []struct {
		server string
		entry  *string
	}{{srv.redis, &c.redis}, {srv.iperf, &c.iperf}, {srv.nginx, &c.nginx}, {srv.echo, &c.echo}} {
		mid, err := st.port()
		if err != nil {
			return nil, err
		}
		in, err := st.port()
		if err != nil {
			return nil, err
		}
		midAddr := net.JoinHostPort(st.srvHost, fmt.Sprint(mid))
		*x.entry = fmt.Sprintf("127.0.0.1:%d", in)
		serverSide := []string{"--listen", kind + "://" + midAddr, "--to", "tcp://" + x.server}
		clientSide := []string{"--listen", "tcp://" + *x.entry, "--to", kind + "://" + midAddr}
		if kind == "vroce" {
			clientSide = append(clientSide, "--no-fallback")
		}
		if _, err := ps.start(st, st.srvNS, proxy, serverSide...); err != nil {
			return nil, err
		}
		if err := awaitListening(st.srvNS, midAddr); err != nil {
			return nil, err
		}
		if _, err := ps.start(st, st.cliNS, proxy, clientSide...); err != nil {
			return nil, err
		}
		if err := awaitListening(st.cliNS, *x.entry); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// command is a client program run beside the chain's clients.
func (c *chain) command(name string, args ...string) *exec.Cmd {
	if len(c.wrap) > 0 {
		name, args = c.wrap[0], append(append(slices.Clone(c.wrap[1:]), name), args...)
	}
	return c.st.command(c.ns, name, args...)
}

// check reads data back through the chain byte for byte.
func (c *chain) check(srv *servers) error {
	got, err := c.command("curl", "-sS", "--fail", "--max-time", "10", "http://"+c.nginx+"/file").Output()
	if err != nil {
		return fmt.Errorf("curl: %v", err)
	}
	if sha256.Sum256(got) != sha256.Sum256(srv.file) {
		return fmt.Errorf("nginx: %d bytes read back differ from the %d-byte file", len(got), len(srv.file))
	}

	value := make([]byte, 1<<20)
	rand.Read(value)
	host, port, _ := net.SplitHostPort(c.redis)
	set := c.command("redis-cli", "-h", host, "-p", port, "-x", "SET", "vroce-check")
	set.Stdin = bytes.NewReader(value)
	if out, err := set.CombinedOutput(); err != nil || !bytes.Contains(out, []byte("OK")) {
		return fmt.Errorf("redis SET of 1 MiB: %v: %s", err, out)
	}
	back, err := c.command("redis-cli", "-h", host, "-p", port, "--no-raw", "STRLEN", "vroce-check").Output()
	if err != nil || strings.TrimSpace(strings.TrimPrefix(string(back), "(integer)")) != fmt.Sprint(len(value)) {
		return fmt.Errorf("redis STRLEN: %v: %s", err, back)
	}
	get, err := c.command("redis-cli", "-h", host, "-p", port, "--raw", "GET", "vroce-check").Output()
	if err != nil {
		return fmt.Errorf("redis GET: %v", err)
	}
	if !bytes.Equal(bytes.TrimSuffix(get, []byte("\n")), value) {
		return fmt.Errorf("redis: the 1 MiB value read back differs (%d bytes)", len(get))
	}
	_, err = iperf(c, time.Second)
	return err
}

// redisBench runs redis-benchmark for one test with 32 clients, each
// with pipeline requests in flight, and returns requests per second.
func redisBench(c *chain, test string, requests, pipeline int) (float64, error) {
	host, port, _ := net.SplitHostPort(c.redis)
	out, err := c.command("redis-benchmark", "-h", host, "-p", port, "-t", test, "-c", "32", "-P", fmt.Sprint(pipeline), "-n", fmt.Sprint(requests), "--csv").CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("redis-benchmark: %v: %s", err, out)
	}
	return parseRedisCSV(out, test)
}

// parseRedisCSV finds test's requests per second in redis-benchmark's
// --csv output ("test","rps",...).
func parseRedisCSV(out []byte, test string) (float64, error) {
	return redisCSVField(out, test, "rps")
}

// iperf runs one iperf3 client stream and returns the goodput received,
// in Gbit/s. (Its sender's count runs ahead of its receiver's by what is
// in flight when the test ends, in the proxies too: they differ.)
func iperf(c *chain, dur time.Duration) (float64, error) {
	host, port, _ := net.SplitHostPort(c.iperf)
	secs := max(1, int(dur/time.Second))
	out, err := c.command("iperf3", "-c", host, "-p", port, "-t", fmt.Sprint(secs), "-J").Output()
	var r struct {
		Error string `json:"error"`
		End   struct {
			SumSent     struct{ Bytes float64 } `json:"sum_sent"`
			SumReceived struct {
				Bytes         float64
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
	}
	if jerr := json.Unmarshal(out, &r); jerr != nil {
		return 0, fmt.Errorf("iperf3: %v; %v", err, jerr)
	}
	switch {
	case r.Error != "":
		return 0, errors.New("iperf3: " + r.Error)
	case err != nil:
		return 0, fmt.Errorf("iperf3: %v", err)
	case r.End.SumReceived.Bytes == 0:
		return 0, fmt.Errorf("iperf3: %.0f bytes sent, none received", r.End.SumSent.Bytes)
	}
	return r.End.SumReceived.BitsPerSecond / 1e9, nil
}

var (
	wrkRate   = regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`)
	wrkErrors = regexp.MustCompile(`(Socket errors:.*|Non-2xx or 3xx responses: \d+)`)
)

// wrk fetches nginx's file over conns connections for dur and returns
// requests per second; any socket error or non-2xx answer fails it.
func wrk(c *chain, conns int, dur time.Duration) (float64, error) {
	threads := min(2, conns)
	out, err := c.command("wrk", "-t", fmt.Sprint(threads), "-c", fmt.Sprint(conns), "-d", fmt.Sprintf("%ds", max(1, int(dur/time.Second))),
		"http://"+c.nginx+"/file").CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("wrk: %v: %s", err, out)
	}
	return parseWrk(out)
}

// parseWrk reads wrk's requests per second, failing on any socket error
// or non-2xx answer it reports.
func parseWrk(out []byte) (float64, error) {
	if m := wrkErrors.Find(out); m != nil {
		return 0, fmt.Errorf("wrk: %s", m)
	}
	m := wrkRate.FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("wrk: no rate in %q", out)
	}
	return strconv.ParseFloat(string(m[1]), 64)
}

// serveEcho sends back what each connection to addr sends (a process of
// its own, beside the servers).
func serveEcho(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer c.Close()
			// A plain copy: io.Copy from a TCP connection to itself
			// splices through a pipe, two descriptors more per
			// connection, and ten thousand of them outran the
			// process's 20,000.
			buf := make([]byte, 4096)
			io.CopyBuffer(struct{ io.Writer }{c}, struct{ io.Reader }{c}, buf)
		}()
	}
}

// echoLoad runs the echo load through the chain, as a process of this
// command's own beside the clients, and returns exchanges per second and
// how long the connections took to be up end to end.
func (c *chain) echoLoad(self string, conns int, dur time.Duration) (float64, time.Duration, error) {
	cmd := c.command(self, "-echo-client", c.echo, "-echo-n", fmt.Sprint(conns), "-duration", dur.String())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return 0, 0, fmt.Errorf("%v: %s", err, bytes.TrimSpace(stderr.Bytes()))
	}
	var rate, setup float64
	if _, err := fmt.Sscan(string(out), &rate, &setup); err != nil {
		return 0, 0, fmt.Errorf("echo client: %q: %w", out, err)
	}
	return rate, time.Duration(setup * float64(time.Second)), nil
}

// echoLoad runs conns connections, each sending 1 KiB and reading it
// back in turn, for dur, and returns exchanges per second and how long
// the connections took to be up end to end. Each connection's first
// exchange is a warm-up, and the timed ones begin when every connection
// has had its own: a proxy sets up its side of a connection as the TCP
// connection arrives, and with 10,000 of them that setup took most of a
// short run, so a rate timed from the dials measured connections set up,
// not the cost of a request (issue 20's). The setup is reported beside
// it. An answer that differs from the request fails the run.
func echoLoad(addr string, conns int, dur time.Duration) (float64, time.Duration, error) {
	cs := make([]net.Conn, 0, conns)
	defer func() {
		for _, c := range cs {
			c.Close()
		}
	}()
	start := time.Now()
	for range conns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return 0, 0, fmt.Errorf("echo: %d of %d connections: %w", len(cs), conns, err)
		}
		cs = append(cs, c)
	}
	var done atomic.Int64
	var warm sync.WaitGroup
	begin := make(chan struct{})
	var end time.Time // set before begin closes
	errc := make(chan error, conns)
	warm.Add(len(cs))
	for i, c := range cs {
		go func() {
			req, back := make([]byte, 1024), make([]byte, 1024)
			for k := range req {
				req[k] = byte(i + k)
			}
			exchange := func() error {
				if _, err := c.Write(req); err != nil {
					return err
				}
				if _, err := io.ReadFull(c, back); err != nil {
					return err
				}
				if !bytes.Equal(req, back) {
					return errors.New("echo: the answer differs from the request")
				}
				return nil
			}
			err := exchange()
			warm.Done()
			if err != nil {
				errc <- fmt.Errorf("echo: the first exchange: %w", err)
				return
			}
			<-begin
			for time.Now().Before(end) {
				if err := exchange(); err != nil {
					errc <- err
					return
				}
				done.Add(1)
			}
			errc <- nil
		}()
	}
	warm.Wait()
	setup := time.Since(start)
	timed := time.Now()
	end = timed.Add(dur)
	close(begin)
	for range cs {
		if err := <-errc; err != nil {
			return 0, 0, err
		}
	}
	return float64(done.Load()) / time.Since(timed).Seconds(), setup, nil
}
