package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"vroce.dev/internal/workload"
)

// result is one line of output: perftest's columns, or one JSON object.
type result struct {
	Test       string  `json:"test"`
	Provider   string  `json:"provider"`
	Bytes      int     `json:"bytes"`
	Iterations int     `json:"iterations"`
	QPs        int     `json:"qps"`
	MTU        int     `json:"mtu,omitempty"`
	Seconds    float64 `json:"seconds"`
	BWPeak     float64 `json:"bw_peak_mibps"`
	BWAvg      float64 `json:"bw_avg_mibps"`
	MsgRate    float64 `json:"msg_rate_mpps"`
	LatMin     float64 `json:"lat_min_us"`
	LatMax     float64 `json:"lat_max_us"`
	LatTypical float64 `json:"lat_typical_us"`
	LatAvg     float64 `json:"lat_avg_us"`
	LatStdev   float64 `json:"lat_stdev_us"`
	LatP99     float64 `json:"lat_p99_us"`
	LatP999    float64 `json:"lat_p999_us"`
	Verified   bool    `json:"verified"`
	// UDPChecksum: the QPs left the ICRC to the UDP checksum (a vRoCE
	// peer on a provider that verifies it; verbs tests only).
	UDPChecksum bool   `json:"udp_checksum,omitempty"`
	Retransmits uint64 `json:"retransmits"`
	Timeouts    uint64 `json:"timeouts"`
	// Transport state at the end: fast retransmissions and tail probes
	// (selective repeat), the congestion window summed over QPs, SRTT.
	FastRetransmits uint64 `json:"fast_retransmits"`
	TailProbes      uint64 `json:"tail_probes"`
	Spurious        uint64 `json:"spurious_timeouts"`
	// StallHolds: loss deadlines held because a send of this side's had
	// not returned (the host, not the path, stalled).
	StallHolds uint64 `json:"send_stall_holds"`
	// RNRWaits: messages the peer refused for want of a posted receive,
	// sent again after its RNR timer (a receiver that fell behind).
	RNRWaits uint64 `json:"rnr_waits"`
	// ACKs this side sent, and how many of them rode on a request.
	ACKs      uint64  `json:"acks_sent"`
	PiggyACKs uint64  `json:"piggybacked_acks"`
	CWnd      int     `json:"cwnd_packets"`
	SRTT      float64 `json:"srtt_us"`
	// DeviceOpenMs is how long the client's vroce.Open took: for a
	// provider out of process, the plugin's launch and its first device.
	DeviceOpenMs float64 `json:"device_open_ms,omitempty"`
	// conn_rate: memory per QP is the growth of the live Go heap and of
	// the resident set over the run, per connected QP, on each end.
	Mode             string  `json:"mode,omitempty"`
	Backlog          int     `json:"backlog,omitempty"`
	Established      int     `json:"established"`
	ConnsPerSec      float64 `json:"conns_per_sec"`
	BytesPerQP       float64 `json:"bytes_per_qp"`
	RSSPerQP         float64 `json:"rss_per_qp"`
	ServerBytesPerQP float64 `json:"server_bytes_per_qp"`
	ServerRSSPerQP   float64 `json:"server_rss_per_qp"`
	CMRetransmits    uint64  `json:"cm_retransmits"`
	// Refused counts what this side's device refused (refusals), zeros
	// left out.
	Refused map[string]uint64 `json:"refused,omitempty"`
	// CPUPerGiB is the user and system CPU seconds this process spent per
	// GiB moved (bandwidth tests): the client's cost, and with --loopback
	// both ends'.
	CPUPerGiB float64 `json:"cpu_s_per_gib,omitempty"`
}

// setCPU records cpu as seconds per GiB for a bandwidth result.
func (r *result) setCPU(cfg *config, cpu time.Duration) {
	if !r.isLat() {
		r.CPUPerGiB = workload.CPUPerGiB(cpu, float64(r.Bytes)*float64(r.Iterations))
	}
}

func (r *result) print(w io.Writer, asJSON bool) {
	if asJSON {
		b, _ := json.Marshal(r)
		fmt.Fprintf(w, "%s\n", b)
		return
	}
	fmt.Fprintf(w, "---------------------------------------------------------------------------------------\n")
	if r.Test == "conn_rate" {
		if r.Mode == "cm" {
			fmt.Fprintf(w, " conn_rate over %s, RDMA_CM, backlog %d\n", r.Provider, r.Backlog)
		} else {
			fmt.Fprintf(w, " conn_rate over %s, SOCKET (a TCP connection per QP)\n", r.Provider)
		}
		fmt.Fprintf(w, " #qps       established  seconds    conns/sec   heap B/QP client/server   RSS B/QP client/server\n")
		fmt.Fprintf(w, " %-10d %-12d %-10.2f %-11.0f %-8.0f / %-16.0f %-8.0f / %.0f\n", r.QPs, r.Established, r.Seconds,
			r.ConnsPerSec, r.BytesPerQP, r.ServerBytesPerQP, r.RSSPerQP, r.ServerRSSPerQP)
		if r.Mode == "cm" {
			fmt.Fprintf(w, " CM messages repeated: %d\n", r.CMRetransmits)
		}
		printRefusals(w, r.Refused)
		return
	}
	if len(r.Test) > 7 && r.Test[:7] == "stream_" {
		mode := r.Mode
		if mode == "" {
			mode = "socket"
		}
		if r.Provider == "tcp" {
			mode = "kernel"
		}
		fmt.Fprintf(w, " %s over %s (%s), verified: %v\n", r.Test, r.Provider, mode, r.Verified)
	} else {
		icrc := ""
		if r.UDPChecksum {
			icrc = ", ICRC left to the UDP checksum"
		}
		fmt.Fprintf(w, " %s over %s, %d QP(s), MTU %d, verified: %v%s\n", r.Test, r.Provider, r.QPs, r.MTU, r.Verified, icrc)
	}
	if r.Test == "" || r.isLat() {
		fmt.Fprintf(w, " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99%% percentile[usec]   99.9%% percentile[usec]\n")
		fmt.Fprintf(w, " %-6d %-11d %-14.2f %-14.2f %-16.2f %-14.2f %-15.2f %-22.2f %.2f\n",
			r.Bytes, r.Iterations, r.LatMin, r.LatMax, r.LatTypical, r.LatAvg, r.LatStdev, r.LatP99, r.LatP999)
	} else {
		fmt.Fprintf(w, " #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]\n")
		fmt.Fprintf(w, " %-10d %-14d %-19.2f %-21.2f %.6f\n", r.Bytes, r.Iterations, r.BWPeak, r.BWAvg, r.MsgRate)
		if r.CPUPerGiB > 0 {
			fmt.Fprintf(w, " CPU %.2f s per GiB (user + system, this process)\n", r.CPUPerGiB)
		}
	}
	if r.Provider != "tcp" {
		undone := ""
		if r.Spurious > 0 {
			undone = fmt.Sprintf(" (%d undone: what they presumed lost had arrived)", r.Spurious)
		}
		fmt.Fprintf(w, " retransmissions %d (fast %d, tail probes %d), timeouts %d%s, window %d packets, SRTT %.1f us\n",
			r.Retransmits, r.FastRetransmits, r.TailProbes, r.Timeouts, undone, r.CWnd, r.SRTT)
		if r.StallHolds > 0 {
			fmt.Fprintf(w, " loss deadlines held while a send of ours was stuck in this host %d\n", r.StallHolds)
		}
		if r.RNRWaits > 0 {
			fmt.Fprintf(w, " messages refused for want of a receive (RNR NAKs) %d\n", r.RNRWaits)
		}
		if r.PiggyACKs > 0 {
			fmt.Fprintf(w, " piggybacked ACKs %d of %d\n", r.PiggyACKs, r.ACKs+r.PiggyACKs)
		}
	}
	switch {
	case r.DeviceOpenMs > 0 && strings.HasPrefix(r.Provider, "plugin:"):
		fmt.Fprintf(w, " device opened in %.1f ms, the plugin's launch included\n", r.DeviceOpenMs)
	case r.DeviceOpenMs > 0:
		fmt.Fprintf(w, " device opened in %.1f ms\n", r.DeviceOpenMs)
	}
	printRefusals(w, r.Refused)
}

func (r *result) isLat() bool { return len(r.Test) > 4 && r.Test[len(r.Test)-4:] == "_lat" }

// mark is how many bytes had completed at a time into the run.
type mark = workload.Mark

// peakWindow is the shortest interval the peak bandwidth is measured over.
const peakWindow = 50 * time.Millisecond

// setBandwidth fills the bandwidth columns: the average over the run and
// the best rate over any window of at least peakWindow between marks.
func (r *result) setBandwidth(total int64, elapsed time.Duration, marks []mark) {
	r.Seconds = elapsed.Seconds()
	const mib = 1 << 20
	r.BWAvg = float64(total) / mib / r.Seconds
	r.MsgRate = float64(r.Iterations) / r.Seconds / 1e6
	r.BWPeak = r.BWAvg
	for i := 1; i < len(marks); i++ {
		if d := marks[i].At - marks[i-1].At; d >= peakWindow {
			r.BWPeak = math.Max(r.BWPeak, float64(marks[i].Bytes-marks[i-1].Bytes)/mib/d.Seconds())
		}
	}
}

// setLatency fills the latency columns from per-iteration samples.
func (r *result) setLatency(samples []time.Duration, elapsed time.Duration) {
	r.Seconds = elapsed.Seconds()
	if len(samples) == 0 {
		return
	}
	l := workload.Summarize(samples)
	r.LatMin, r.LatMax, r.LatTypical, r.LatAvg = l.Min, l.Max, l.Typical, l.Avg
	r.LatStdev, r.LatP99, r.LatP999 = l.Stdev, l.P99, l.P999
	r.MsgRate = float64(len(samples)) / r.Seconds / 1e6
}
