package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"

	"vroce.dev/internal/workload"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "quic-perf:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	if len(args) == 0 || (args[0] != "stream_bw" && args[0] != "stream_lat") {
		return errors.New("usage: quic-perf stream_bw|stream_lat [-s bytes] [-n iterations] [--json] [--verify]")
	}
	w := workload.Stream{Test: args[0]}
	fs := flag.NewFlagSet("quic-perf "+w.Test, flag.ContinueOnError)
	fs.IntVar(&w.Size, "s", 65536, "message size in bytes")
	fs.IntVar(&w.Iters, "n", 1000, "iterations")
	fs.BoolVar(&w.Verify, "verify", false, "give every message its own pattern and check it at the other end")
	asJSON := fs.Bool("json", false, "print one JSON object per result")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if w.Size < 1 || w.Iters < 1 {
		return fmt.Errorf("-s %d -n %d: both must be at least 1", w.Size, w.Iters)
	}
	for _, t := range []transport{quicTransport{}, tcpTransport{}} {
		r, err := measure(w, t)
		if err != nil {
			return fmt.Errorf("%s over %s: %w", w.Test, t.name(), err)
		}
		if t.name() == "quic" {
			r.Version = quicVersion()
		}
		r.print(stdout, *asJSON)
	}
	return nil
}

// result is one line of output; the JSON names are vroce-perf's.
type result struct {
	Test       string  `json:"test"`
	Provider   string  `json:"provider"`
	Bytes      int     `json:"bytes"`
	Iterations int     `json:"iterations"`
	Seconds    float64 `json:"seconds"`
	BWAvg      float64 `json:"bw_avg_mibps"`
	MsgRate    float64 `json:"msg_rate_mpps"`
	LatTypical float64 `json:"lat_typical_us"`
	LatP99     float64 `json:"lat_p99_us"`
	Verified   bool    `json:"verified"`
	CPUPerGiB  float64 `json:"cpu_s_per_gib,omitempty"`
	Version    string  `json:"version,omitempty"` // quic-go's, for QUIC
}

// quicVersion is the quic-go this binary was built with.
func quicVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			if m.Path == "github.com/quic-go/quic-go" {
				return m.Version
			}
		}
	}
	return "(unknown version)"
}

func (r *result) print(w io.Writer, asJSON bool) {
	if asJSON {
		b, _ := json.Marshal(r)
		fmt.Fprintf(w, "%s\n", b)
		return
	}
	fmt.Fprintf(w, " %s over %s %s, verified: %v\n", r.Test, r.Provider, r.Version, r.Verified)
	if r.Test == "stream_lat" {
		fmt.Fprintf(w, " #bytes #iterations  t_typical[usec]  99%% percentile[usec]\n")
		fmt.Fprintf(w, " %-6d %-12d %-16.2f %.2f\n", r.Bytes, r.Iterations, r.LatTypical, r.LatP99)
		return
	}
	fmt.Fprintf(w, " #bytes     #iterations    BW average[MiB/sec]   MsgRate[Mpps]\n")
	fmt.Fprintf(w, " %-10d %-14d %-21.2f %.6f\n", r.Bytes, r.Iterations, r.BWAvg, r.MsgRate)
	fmt.Fprintf(w, " CPU %.2f s per GiB (user + system, this process)\n", r.CPUPerGiB)
}
