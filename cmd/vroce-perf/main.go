package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"runtime/trace"
	"strings"
	"time"

	_ "vroce.dev/providers/afxdp"
	"vroce.dev/providers/plugin"
	_ "vroce.dev/providers/sim"
	"vroce.dev/vroce"
)

// params is what a run is: the client's choice, which its hello carries
// to the server (whose own flags must name the same test).
type params struct {
	Test    string
	Size    int
	Iters   int
	MTU     int
	QPs     int
	TxDepth int
	Verify  bool
	Compare string
	Inline  int
	// conn_rate and the streams
	Mode        string
	Backlog     int
	Concurrency int
}

// config is one end's flags: the run's params, and what is this end's
// own: its provider and device, the simulated network's faults (with
// --loopback both ends share them), output and profiling, and the
// out-of-band exchange of another tool.
type config struct {
	params
	Provider string
	Iface    string
	BusyPoll time.Duration
	DevAddr  string
	Loss     float64
	Reorder  float64
	Dup      float64
	Delay    time.Duration
	GoBackN  bool
	JSON     bool
	Loopback bool
	Port     int
	Server   string
	CPUProf  string
	Trace    string
	// Oob names the out-of-band exchange of another tool to speak
	// instead of vroce-perf's own: pingpong (rdma-core's
	// ibv_rc_pingpong and ibv_ud_pingpong), perftest.
	Oob       string
	Conn      string // RC or UD, as perftest's -c
	RDMACM    bool   // --oob perftest over RDMA_CM, as perftest's -R
	SRQ       bool   // --oob pingpong: ibv_srq_pingpong, --qps QPs on one SRQ
	AllSizes  bool   // --oob perftest: every size from 2 B to 8 MiB, as perftest's -a
	RunFor    int    // --oob perftest client of write_bw or read_bw: seconds to run instead of -n, as perftest's -D
	Duplex    bool   // --oob perftest write_bw, read_bw or send_bw: both ends move -n, as perftest's -b
	quietProg bool
}

// perftestTests are the tests --oob perftest speaks for.
var perftestTests = map[string]bool{"write_bw": true, "read_bw": true, "send_bw": true, "send_lat": true,
	"write_lat": true, "read_lat": true, "atomic_lat": true, "atomic_bw": true}

// pfRDMACMTests are those of perftestTests that also speak perftest's -R.
var pfRDMACMTests = map[string]bool{"write_bw": true, "read_bw": true, "send_bw": true, "send_lat": true}

func (c *config) isLat() bool { return strings.HasSuffix(c.Test, "_lat") }

func usage(w io.Writer) {
	fmt.Fprintf(w, `usage: vroce-perf TEST [flags] [SERVER]

TEST is one of send_bw, write_bw, read_bw, send_lat, write_lat, read_lat,
atomic_lat; conn_rate (connections per second and memory per idle QP);
stream_bw and stream_lat (rsock streams, the net.Conn layer); rping and
udaddy (librdmacm's rping and udaddy over RDMA_CM, against any RoCE peer).
With --oob, the end of another tool: --oob pingpong with send_lat is
ibv_rc_pingpong (--conn UD: ibv_ud_pingpong; --srq: ibv_srq_pingpong), --oob perftest with
write_bw, read_bw, send_bw, atomic_bw, send_lat, write_lat, read_lat or atomic_lat
is perftest's ib_ tool of the same name.
Without SERVER the command waits for a client; with it, it connects; with
--loopback both ends run in this process.

flags:
`)
	flag.CommandLine.SetOutput(w)
	flag.PrintDefaults()
}

func main() {
	if len(os.Args) < 2 || !isTest(os.Args[1]) {
		if len(os.Args) >= 2 && (os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help") {
			defineFlags(&config{})
			usage(os.Stdout)
			return
		}
		fmt.Fprintf(os.Stderr, "vroce-perf: first argument must be a test name\n")
		defineFlags(&config{})
		usage(os.Stderr)
		os.Exit(2)
	}
	cfg := &config{params: params{Test: os.Args[1]}}
	defineFlags(cfg)
	if err := flag.CommandLine.Parse(os.Args[2:]); err != nil {
		os.Exit(2)
	}
	if flag.NArg() > 1 {
		fmt.Fprintf(os.Stderr, "vroce-perf: unexpected arguments %v\n", flag.Args()[1:])
		os.Exit(2)
	}
	cfg.Server = flag.Arg(0)
	if err := cfg.finish(); err != nil {
		fmt.Fprintln(os.Stderr, "vroce-perf:", err)
		os.Exit(2)
	}
	stopProfile := record(cfg.CPUProf, pprof.StartCPUProfile, pprof.StopCPUProfile)
	stopTrace := record(cfg.Trace, trace.Start, trace.Stop)
	var results []*result
	var err error
	switch cfg.Oob {
	case "pingpong":
		if cfg.SRQ {
			err = runSRQPingpong(cfg)
			break
		}
		err = runPingpong(cfg)
	case "perftest":
		err = runPerftest(cfg)
	case "":
		if cfg.Test == "rping" {
			err = runRping(cfg)
			break
		}
		if cfg.Test == "udaddy" {
			err = runUdaddy(cfg)
			break
		}
		fallthrough
	default:
		results, err = run(cfg)
	}
	stopProfile()
	stopTrace()
	plugin.Cleanup()
	for _, r := range results {
		r.print(os.Stdout, cfg.JSON)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "vroce-perf:", err)
		os.Exit(1)
	}
}

// mtuChoices are the path MTUs -mtu takes (vroce.MTU.Valid), for the
// flag's help and its refusal.
const mtuChoices = "256, 512, 1024, 2048 or 4096, or between vRoCE peers 1344, 8192, 16384 or 32768"

func defineFlags(c *config) {
	flag.CommandLine = flag.NewFlagSet("vroce-perf", flag.ContinueOnError)
	fs := flag.CommandLine
	fs.StringVar(&c.Provider, "provider", "", "packet provider: udp, afxdp, sim, or plugin:NAME for one out of process (default $VROCE_PROVIDER, then udp)")
	fs.StringVar(&c.Iface, "iface", "", "afxdp provider: the network interface (default $VROCE_IFACE)")
	fs.DurationVar(&c.BusyPoll, "busy-poll", 0, "udp provider: keep trying to receive this long before sleeping, e.g. 50us (default $VROCE_BUSY_POLL)")
	fs.IntVar(&c.Size, "s", 0, "message size in bytes (default 65536 for _bw, 2 for _lat, 8 for atomic_lat)")
	fs.IntVar(&c.Size, "size", 0, "same as -s")
	fs.IntVar(&c.Iters, "n", 0, "iterations (default 5000 for _bw, 1000 for _lat)")
	fs.IntVar(&c.Iters, "iters", 0, "same as -n")
	fs.IntVar(&c.MTU, "mtu", 0, "path MTU: "+mtuChoices+" (default: the largest the link carries)")
	fs.IntVar(&c.QPs, "qps", 0, "queue pairs (bandwidth tests spread iterations across them; --oob perftest: each moves -n, as perftest's -q; conn_rate connects this many; --srq plays ping-pong on each) (default 1; 16 with --srq, as ibv_srq_pingpong)")
	fs.StringVar(&c.Mode, "mode", "", "conn_rate and stream tests: how QPs connect: cm (RDMA_CM) or socket (a TCP exchange each); default cm for conn_rate, $RSOCK_MODE then socket for streams")
	fs.IntVar(&c.Backlog, "backlog", 0, "conn_rate --mode cm: the server's listen backlog and max_backlog (default 1024)")
	fs.IntVar(&c.Concurrency, "concurrency", 0, "conn_rate: connects in flight at once (default min(qps, 4096))")
	fs.IntVar(&c.TxDepth, "tx-depth", 128, "outstanding work requests per QP (bandwidth tests)")
	fs.BoolVar(&c.Verify, "verify", false, "check every byte that arrives")
	fs.StringVar(&c.Compare, "compare", "", "run the same workload over another transport too: tcp")
	fs.BoolVar(&c.JSON, "json", false, "print one JSON object per result")
	fs.BoolVar(&c.Loopback, "loopback", false, "run server and client in this process")
	fs.IntVar(&c.Port, "port", 0, "TCP control port (default 18515); rping, udaddy: the rdma_cm service port (default 7174)")
	fs.Float64Var(&c.Loss, "loss", 0, "sim provider: fraction of packets lost (0.01 is 1%)")
	fs.Float64Var(&c.Reorder, "reorder", 0, "sim provider: fraction of packets reordered")
	fs.Float64Var(&c.Dup, "dup", 0, "sim provider: fraction of packets duplicated")
	fs.DurationVar(&c.Delay, "delay", 0, "sim provider: one-way delay, e.g. 50us")
	fs.BoolVar(&c.GoBackN, "go-back-n", false, "do not negotiate selective repeat (behave as rdma_rxe)")
	fs.StringVar(&c.CPUProf, "cpuprofile", "", "write a CPU profile of the run to this file")
	fs.StringVar(&c.Trace, "trace", "", "write a Go execution trace of the run to this file (go tool trace)")
	fs.StringVar(&c.Oob, "oob", "", "speak another tool's out-of-band exchange, to run against any RoCE peer: pingpong (ibv_rc_pingpong, ibv_ud_pingpong; with send_lat), perftest (ib_write_bw, ib_read_bw, ib_send_bw, ib_atomic_bw, ib_send_lat, ib_write_lat, ib_read_lat, ib_atomic_lat)")
	fs.StringVar(&c.Conn, "conn", "RC", "--oob: the QP type, RC or UD (UD: ibv_ud_pingpong)")
	fs.BoolVar(&c.SRQ, "srq", false, "--oob pingpong: ibv_srq_pingpong, --qps RC QPs receiving from one shared receive queue")
	fs.BoolVar(&c.RDMACM, "rdma-cm", false, "--oob perftest: connect and exchange through RDMA_CM, no TCP (perftest's -R)")
	fs.BoolVar(&c.RDMACM, "R", false, "same as --rdma-cm")
	fs.BoolVar(&c.AllSizes, "all", false, "--oob perftest with write_bw, read_bw, write_lat or read_lat: every size from 2 bytes to 8 MiB, -n of each (perftest's -a)")
	fs.BoolVar(&c.AllSizes, "a", false, "same as --all")
	fs.BoolVar(&c.Duplex, "bidirectional", false, "--oob perftest with write_bw, read_bw or send_bw: both ends move -n at once, and each prints the sum (perftest's -b, given to both)")
	fs.BoolVar(&c.Duplex, "b", false, "same as --bidirectional")
	fs.IntVar(&c.RunFor, "D", 0, "--oob perftest with write_bw or read_bw: the client runs this many seconds instead of -n (perftest's -D; a server, passive, takes it and needs none)")
	fs.StringVar(&c.DevAddr, "dev-addr", "", "the device's local address host:port (default :4791 for a server, :0 for a client, 127.0.0.1:0 with --loopback)")
}

func (c *config) finish() error {
	c.Provider = vroce.ProviderName(c.Provider)
	if c.Conn == "" {
		c.Conn = "RC"
	}
	if c.Size == 0 {
		switch {
		case c.Oob == "pingpong" && c.Conn == "UD":
			c.Size = 2048 // ibv_ud_pingpong's default
		case c.Oob == "pingpong":
			c.Size = 4096 // ibv_rc_pingpong's
		case c.Test == "rping":
			c.Size = 64 // rping's
		case c.Test == "udaddy":
			c.Size = 100 // udaddy's
		case c.Test == "atomic_lat" || c.Test == "atomic_bw":
			c.Size = 8
		case c.isLat():
			c.Size = 2
		default:
			c.Size = 65536
		}
	}
	if c.Iters == 0 {
		c.Iters = 5000
		if c.isLat() {
			c.Iters = 1000
		}
		if c.Test == "rping" || c.Test == "udaddy" {
			c.Iters = 10 // theirs
		}
	}
	if c.QPs == 0 {
		c.QPs = 1
		if c.SRQ {
			c.QPs = 16 // ibv_srq_pingpong's
		}
	}
	if c.Port == 0 {
		c.Port = 18515
		if c.Test == "rping" || c.Test == "udaddy" {
			c.Port = rpingPort // librdmacm's examples' 7174
		}
	}
	switch {
	case c.Oob != "" && c.Oob != "pingpong" && c.Oob != "perftest":
		return fmt.Errorf("--oob %q: pingpong or perftest", c.Oob)
	case c.Oob == "perftest" && (!perftestTests[c.Test] || c.Loopback):
		return fmt.Errorf("--oob perftest plays ib_write_bw, ib_read_bw, ib_send_bw, ib_atomic_bw, ib_send_lat, ib_write_lat, ib_read_lat and ib_atomic_lat: write_bw, read_bw, send_bw, atomic_bw, send_lat, write_lat, read_lat or atomic_lat, between two hosts")
	case c.Test == "atomic_bw" && c.Oob != "perftest":
		return fmt.Errorf("atomic_bw goes with --oob perftest (ib_atomic_bw)")
	case c.AllSizes && (c.Oob != "perftest" || c.Test != "write_bw" && c.Test != "read_bw" && c.Test != "write_lat" && c.Test != "read_lat"):
		return fmt.Errorf("--all goes with --oob perftest and write_bw, read_bw, write_lat or read_lat (perftest's -a)")
	case c.RunFor < 0 || c.RunFor > 0 && (c.Oob != "perftest" || c.Test != "write_bw" && c.Test != "read_bw" || c.AllSizes):
		return fmt.Errorf("-D goes with --oob perftest and write_bw or read_bw, without --all (perftest's -D), and counts seconds")
	case c.Duplex && (c.Oob != "perftest" || c.Test != "write_bw" && c.Test != "read_bw" && c.Test != "send_bw" || c.RunFor > 0 || c.RDMACM):
		return fmt.Errorf("-b goes with --oob perftest and write_bw, read_bw or send_bw, without -D or --rdma-cm (perftest's -b)")
	case c.Oob == "perftest" && c.RDMACM && (!pfRDMACMTests[c.Test] || c.QPs > 1):
		return fmt.Errorf("--rdma-cm: write_bw, read_bw, send_bw or send_lat, with one QP")
	case c.Oob == "pingpong" && (c.Test != "send_lat" || c.Loopback):
		return fmt.Errorf("--oob pingpong plays ibv_rc_pingpong and ibv_ud_pingpong: send_lat, between two hosts")
	case c.Test == "rping" && (c.Loopback || c.Oob != "" || c.Size < 16):
		return fmt.Errorf("rping speaks librdmacm's rping over RDMA_CM, between two hosts, with at least 16 bytes")
	case c.Test == "udaddy" && (c.Loopback || c.Oob != "" || c.Iters > 4096):
		return fmt.Errorf("udaddy speaks librdmacm's udaddy over RDMA_CM, between two hosts, at most 4096 datagrams")
	case c.Conn != "RC" && c.Conn != "UD":
		return fmt.Errorf("--conn %q: RC or UD", c.Conn)
	case c.RDMACM && c.Oob != "perftest":
		return fmt.Errorf("--rdma-cm goes with --oob perftest (rping always uses RDMA_CM)")
	case c.Conn == "UD" && c.Oob == "":
		return fmt.Errorf("--conn UD goes with --oob pingpong")
	case c.SRQ && (c.Oob != "pingpong" || c.Conn != "RC" || c.QPs > srqMaxQP):
		return fmt.Errorf("--srq plays ibv_srq_pingpong: with --oob pingpong, RC, and at most %d QPs", srqMaxQP)
	case (c.Test == "atomic_lat" || c.Test == "atomic_bw") && c.Size != 8:
		return fmt.Errorf("%s moves 8 bytes; -s %d", c.Test, c.Size)
	case c.Size < 1 || c.Size > 1<<30:
		return fmt.Errorf("size %d out of range 1-1 GiB", c.Size)
	case c.Iters < 1:
		return fmt.Errorf("iterations %d must be positive", c.Iters)
	case c.Test == "conn_rate" && (c.QPs < 1 || c.QPs > 1<<23):
		return fmt.Errorf("qps %d out of range 1-%d", c.QPs, 1<<23)
	case c.Test != "conn_rate" && (c.QPs < 1 || c.QPs > 1024):
		return fmt.Errorf("qps %d out of range 1-1024", c.QPs)
	case c.Mode != "" && c.Mode != "cm" && c.Mode != "socket":
		return fmt.Errorf("--mode %q: cm or socket", c.Mode)
	case c.Backlog < 0 || c.Backlog > 1<<20 || c.Concurrency < 0:
		return fmt.Errorf("--backlog is 0-%d and --concurrency is not negative", 1<<20)
	case c.Test == "conn_rate" && c.Compare != "":
		return fmt.Errorf("conn_rate has no --compare")
	case c.TxDepth < 1 || c.TxDepth > vroce.SpecMaxQPWR-8:
		return fmt.Errorf("tx-depth %d out of range 1-%d", c.TxDepth, vroce.SpecMaxQPWR-8)
	case c.MTU != 0 && !vroce.MTU(c.MTU).Valid():
		return fmt.Errorf("mtu %d: the path MTU is one of %s", c.MTU, mtuChoices)
	case c.Compare != "" && c.Compare != "tcp":
		return fmt.Errorf("--compare %q: only tcp", c.Compare)
	case c.Loopback && c.Server != "":
		return fmt.Errorf("--loopback takes no server address")
	case c.Loss < 0 || c.Loss >= 1 || c.Reorder < 0 || c.Reorder > 1 || c.Dup < 0 || c.Dup > 1 || c.Delay < 0:
		return fmt.Errorf("--loss, --reorder and --dup are fractions in [0, 1) and --delay is positive")
	case (c.Loss > 0 || c.Reorder > 0 || c.Dup > 0 || c.Delay > 0) && (c.Provider != "sim" || !c.Loopback):
		return fmt.Errorf("--loss, --reorder, --dup and --delay shape the simulated network: use --provider sim --loopback")
	}
	if c.isLat() && !c.SRQ {
		c.QPs = 1
	}
	if c.Test == "conn_rate" {
		if c.Mode == "" {
			c.Mode = "cm"
		}
		if c.Backlog == 0 {
			c.Backlog = 1024
		}
		if c.Concurrency == 0 {
			c.Concurrency = min(c.QPs, 4096)
		}
	}
	c.Inline = 0
	if c.Size <= 256 && (c.Test == "send_lat" || c.Test == "write_lat") {
		c.Inline = c.Size
	}
	return nil
}

// record starts a recording (a CPU profile, an execution trace) into the
// file at path, if one is named, and returns what ends it.
func record(path string, start func(io.Writer) error, stop func()) (end func()) {
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err == nil {
		err = start(f)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "vroce-perf:", err)
		os.Exit(2)
	}
	return func() {
		stop()
		f.Close()
	}
}
