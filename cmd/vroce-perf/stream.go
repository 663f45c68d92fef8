package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"vroce.dev/internal/workload"
	"vroce.dev/providers/sim"
	"vroce.dev/rsock"
)

// stream_bw and stream_lat measure rsock streams, not verbs: the same
// workloads run over an rsock connection and, with --compare tcp, over a
// kernel TCP connection in the same run. The workloads themselves
// (internal/workload) are shared with quic-perf, which runs them over
// quic-go.

// streamPorts is the server's answer to a stream hello: where to dial.
type streamPorts struct {
	RSock int    `json:"rsock"`
	TCP   int    `json:"tcp"`
	Error string `json:"error,omitempty"`
}

// streamSetup is both ends' listeners and dialers for a run.
type streamSetup struct {
	cfg     *config
	network *sim.Network
}

func (s streamSetup) listenConfig() *rsock.ListenConfig {
	lc := &rsock.ListenConfig{Mode: s.cfg.Mode, Provider: s.cfg.Provider, ProviderOptions: s.cfg.providerOptions()}
	if s.network != nil {
		lc.ProviderOptions, lc.DeviceAddr = s.network, "127.0.0.1:0"
	}
	return lc
}

func (s streamSetup) dialer() *rsock.Dialer {
	d := &rsock.Dialer{Mode: s.cfg.Mode, Provider: s.cfg.Provider, ProviderOptions: s.cfg.providerOptions(), NoFallback: true, Timeout: 30 * time.Second}
	if s.network != nil {
		d.ProviderOptions = s.network
	}
	return d
}

// driveStream is the client: it runs the workload over rsock, then over
// TCP if asked.
func driveStream(cfg *config, c *control, network *sim.Network) ([]*result, error) {
	if err := c.send(hello{Version: protocolVersion, Params: cfg.params}); err != nil {
		return nil, err
	}
	var ports streamPorts
	if err := c.recv(&ports); err != nil {
		return nil, err
	}
	if ports.Error != "" {
		return nil, errors.New("server: " + ports.Error)
	}
	host := c.conn.RemoteAddr().(*net.TCPAddr).IP.String()
	set := streamSetup{cfg, network}
	conn, err := set.dialer().Dial("tcp", net.JoinHostPort(host, strconv.Itoa(ports.RSock)))
	if err != nil {
		return nil, fmt.Errorf("rsock dial: %w", err)
	}
	cpu := workload.ProcessCPU()
	r, err := streamClient(cfg, conn, cfg.Provider)
	if r != nil {
		r.setCPU(cfg, workload.ProcessCPU()-cpu)
	}
	conn.Close()
	if err != nil {
		return nil, err
	}
	results := []*result{r}
	defer drainStreams()
	if cfg.Compare == "tcp" {
		conn, err := net.Dial("tcp", net.JoinHostPort(host, strconv.Itoa(ports.TCP)))
		if err != nil {
			return results, err
		}
		cpu := workload.ProcessCPU()
		r, err := streamClient(cfg, conn, "tcp")
		if r != nil {
			r.setCPU(cfg, workload.ProcessCPU()-cpu)
		}
		conn.Close()
		if err != nil {
			return results, fmt.Errorf("tcp comparison: %w", err)
		}
		results = append(results, r)
	}
	return results, nil
}

// serveStream is the server: it listens with rsock and plain TCP, tells
// the client where, and serves one connection on each.
func serveStream(_, run *config, c *control, network *sim.Network) error {
	defer drainStreams()
	set := streamSetup{run, network}
	ip := controlIP(c.conn).String()
	rl, err := set.listenConfig().Listen(context.Background(), "tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		c.send(streamPorts{Error: err.Error()})
		return err
	}
	defer rl.Close()
	tl, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		c.send(streamPorts{Error: err.Error()})
		return err
	}
	defer tl.Close()
	ports := streamPorts{RSock: rl.Addr().(*net.TCPAddr).Port, TCP: tl.Addr().(*net.TCPAddr).Port}
	if err := c.send(ports); err != nil {
		return err
	}
	serve := func(l net.Listener) error {
		conn, err := l.Accept()
		if err != nil {
			return err
		}
		defer conn.Close()
		return streamServer(run, conn)
	}
	if err := serve(rl); err != nil {
		return err
	}
	if run.Compare == "tcp" {
		return serve(tl)
	}
	return nil
}

// streamClient runs the client side of the workload on conn.
func streamClient(cfg *config, conn net.Conn, provider string) (*result, error) {
	r := &result{Test: cfg.Test, Provider: provider, Bytes: cfg.Size, Iterations: cfg.Iters, QPs: 1, Verified: cfg.Verify}
	if provider != "tcp" {
		r.Mode = cfg.Mode
	}
	if t, ok := conn.(interface{ Transport() string }); ok && provider != "tcp" && t.Transport() != "vroce" {
		return nil, fmt.Errorf("the stream fell back to %s", t.Transport())
	}
	w := workload.Stream{Test: cfg.Test, Size: cfg.Size, Iters: cfg.Iters, Verify: cfg.Verify}
	violations := rsock.ReadStats().CreditViolations
	run, err := w.Client(conn)
	if err != nil {
		return nil, err
	}
	addRefusal(&r.Refused, "credit_violations", rsock.ReadStats().CreditViolations-violations)
	if c, ok := conn.(interface{ Info() rsock.Info }); ok {
		in := c.Info()
		r.Retransmits, r.Timeouts, r.CWnd, r.SRTT = in.Retransmits, in.Timeouts, in.CWnd, float64(in.RTT)/1e3
		r.FastRetransmits, r.TailProbes, r.RNRWaits = in.FastRetransmits, in.TailProbes, in.RNRWaits
		r.StallHolds, r.Spurious = in.SendStallHolds, in.SpuriousTimeouts
	}
	if cfg.Test == "stream_lat" {
		r.setLatency(run.Samples, run.Elapsed)
	} else {
		r.setBandwidth(int64(cfg.Iters)*int64(cfg.Size), run.Elapsed, run.Marks)
	}
	return r, nil
}

// streamServer runs the server side of the workload on conn.
func streamServer(cfg *config, conn net.Conn) error {
	return workload.Stream{Test: cfg.Test, Size: cfg.Size, Iters: cfg.Iters, Verify: cfg.Verify}.Server(conn)
}

// drainStreams lets the closed streams finish closing before the run
// ends (and the program exits), so that the peer sees them end cleanly.
func drainStreams() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rsock.Drain(ctx)
}
