package main

import (
	"fmt"
	"io"
	"time"

	"vroce.dev/internal/workload"
)

// The same workloads over kernel TCP, on the control connection: bulk
// transfer for the _bw tests, ping-pong for the _lat tests, with the same
// sizes, iterations and verification.

// tcpStreamsBulk is who sends in a bandwidth test: read_bw moves data
// from the server to the client, the others from client to server.
func tcpClientSends(test string) bool { return test != "read_bw" }

func tcpResult(cfg *config) *result {
	return &result{Test: cfg.Test, Provider: "tcp", Bytes: cfg.Size, Iterations: cfg.Iters, QPs: 1}
}

func tcpSend(c *control, cfg *config) error {
	buf := make([]byte, cfg.Size)
	workload.Pattern(buf, 1)
	for i := 0; i < cfg.Iters; i++ {
		if cfg.Verify {
			workload.Pattern(buf, uint64(i))
		}
		if _, err := c.conn.Write(buf); err != nil {
			return err
		}
	}
	return nil
}

func tcpReceive(c *control, cfg *config) error {
	buf := make([]byte, cfg.Size)
	for i := 0; i < cfg.Iters; i++ {
		if _, err := io.ReadFull(c.r, buf); err != nil {
			return err
		}
		if cfg.Verify {
			if at, ok := workload.CheckPattern(buf, uint64(i)); !ok {
				return fmt.Errorf("tcp: message %d: byte %d differs", i, at)
			}
		}
	}
	return nil
}

// clientTCP runs the client's half and measures.
func clientTCP(c *control, cfg *config) (*result, error) {
	r := tcpResult(cfg)
	r.Verified = cfg.Verify
	one := make([]byte, 1)
	start := time.Now()
	if !cfg.isLat() {
		var err error
		if tcpClientSends(cfg.Test) {
			if err = tcpSend(c, cfg); err == nil {
				_, err = io.ReadFull(c.r, one) // the receiver has it all
			}
		} else {
			err = tcpReceive(c, cfg)
		}
		if err != nil {
			return nil, err
		}
		elapsed := time.Since(start)
		r.setBandwidth(int64(cfg.Size)*int64(cfg.Iters), elapsed, nil)
		return r, nil
	}
	buf := make([]byte, cfg.Size)
	samples := make([]time.Duration, 0, cfg.Iters)
	half := cfg.Test == "send_lat" || cfg.Test == "write_lat"
	for i := 0; i < cfg.Iters; i++ {
		if cfg.Verify {
			workload.Pattern(buf, uint64(2*i))
		}
		t0 := time.Now()
		if _, err := c.conn.Write(buf); err != nil {
			return nil, err
		}
		if _, err := io.ReadFull(c.r, buf); err != nil {
			return nil, err
		}
		d := time.Since(t0)
		if half {
			d /= 2
		}
		samples = append(samples, d)
		if cfg.Verify {
			if at, ok := workload.CheckPattern(buf, uint64(2*i+1)); !ok {
				return nil, fmt.Errorf("tcp: pong %d: byte %d differs", i, at)
			}
		}
	}
	r.setLatency(samples, time.Since(start))
	return r, nil
}

// serverTCP runs the server's half.
func serverTCP(c *control, cfg *config) error {
	if !cfg.isLat() {
		if !tcpClientSends(cfg.Test) {
			return tcpSend(c, cfg)
		}
		if err := tcpReceive(c, cfg); err != nil {
			return err
		}
		_, err := c.conn.Write([]byte{1})
		return err
	}
	buf := make([]byte, cfg.Size)
	for i := 0; i < cfg.Iters; i++ {
		if _, err := io.ReadFull(c.r, buf); err != nil {
			return err
		}
		if cfg.Verify {
			if at, ok := workload.CheckPattern(buf, uint64(2*i)); !ok {
				return fmt.Errorf("tcp: ping %d: byte %d differs", i, at)
			}
			workload.Pattern(buf, uint64(2*i+1))
		}
		if _, err := c.conn.Write(buf); err != nil {
			return err
		}
	}
	return nil
}
