package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	"vroce.dev/providers/sim"
	"vroce.dev/rsock"
)

// stream_bw and stream_lat measure rsock streams, not verbs: the same
// workloads run over an rsock connection and, with --compare tcp, over a
// kernel TCP connection in the same run. stream_bw writes --iters
// messages of --size bytes and waits for the reader's one-byte receipt;
// stream_lat ping-pongs --size bytes and reports half the round trip.

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
	if err := c.send(hello{Version: protocolVersion, Config: *cfg}); err != nil {
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
	cpu := processCPU()
	r, err := streamClient(cfg, conn, cfg.Provider)
	if r != nil {
		r.setCPU(cfg, processCPU()-cpu)
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
		cpu := processCPU()
		r, err := streamClient(cfg, conn, "tcp")
		if r != nil {
			r.setCPU(cfg, processCPU()-cpu)
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
func serveStream(c *control, network *sim.Network, run *config) error {
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
	buf := make([]byte, cfg.Size)
	// Every message carries its own pattern only when it is checked, as
	// in the verbs tests: writing 64 KiB of pattern per message cost the
	// client a fifth of its CPU, a cost neither transport has.
	pattern(buf, 1)
	if cfg.Test == "stream_lat" {
		samples := make([]time.Duration, 0, cfg.Iters)
		start := time.Now()
		for i := range cfg.Iters {
			if cfg.Verify {
				pattern(buf, uint64(i))
			}
			t0 := time.Now()
			if _, err := conn.Write(buf); err != nil {
				return nil, err
			}
			if _, err := io.ReadFull(conn, buf); err != nil {
				return nil, err
			}
			samples = append(samples, time.Since(t0)/2)
			if cfg.Verify {
				if off, ok := checkPattern(buf, uint64(i)); !ok {
					return nil, fmt.Errorf("ping %d came back wrong at byte %d", i, off)
				}
			}
		}
		r.setLatency(samples, time.Since(start))
		return r, nil
	}
	var marks []mark
	start := time.Now()
	for i := range cfg.Iters {
		if cfg.Verify {
			pattern(buf, uint64(i))
		}
		if _, err := conn.Write(buf); err != nil {
			return nil, err
		}
		if i%64 == 63 {
			marks = append(marks, mark{time.Since(start), int64(i+1) * int64(cfg.Size)})
		}
	}
	var receipt [1]byte
	if _, err := io.ReadFull(conn, receipt[:]); err != nil {
		return nil, fmt.Errorf("receipt: %w", err)
	}
	if receipt[0] != 1 {
		return nil, errors.New("the server found the data wrong")
	}
	elapsed := time.Since(start)
	marks = append(marks, mark{elapsed, int64(cfg.Iters) * int64(cfg.Size)})
	r.setBandwidth(int64(cfg.Iters)*int64(cfg.Size), elapsed, marks)
	return r, nil
}

// streamServer runs the server side of the workload on conn.
func streamServer(cfg *config, conn net.Conn) error {
	buf := make([]byte, cfg.Size)
	if cfg.Test == "stream_lat" {
		for range cfg.Iters {
			if _, err := io.ReadFull(conn, buf); err != nil {
				return err
			}
			if _, err := conn.Write(buf); err != nil {
				return err
			}
		}
		return nil
	}
	ok := byte(1)
	for i := range cfg.Iters {
		if _, err := io.ReadFull(conn, buf); err != nil {
			return err
		}
		if cfg.Verify {
			if _, good := checkPattern(buf, uint64(i)); !good {
				ok = 2
			}
		}
	}
	_, err := conn.Write([]byte{ok})
	return err
}

// drainStreams lets the closed streams finish closing before the run
// ends (and the program exits), so that the peer sees them end cleanly.
func drainStreams() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rsock.Drain(ctx)
}
