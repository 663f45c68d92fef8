package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"
)

// measure runs cfg over t, both ends in this process.
func measure(cfg config, t transport) (*result, error) {
	client, finish, err := t.start(func(s io.ReadWriter) error { return serve(cfg, s) })
	if err != nil {
		return nil, err
	}
	cpu := processCPU()
	r, err := drive(cfg, client)
	cpu = processCPU() - cpu
	if ferr := finish(); err == nil {
		err = ferr
	}
	if err != nil {
		return nil, err
	}
	r.Provider = t.name()
	if moved := float64(cfg.size) * float64(cfg.iters); cfg.test == "stream_bw" && cpu > 0 {
		r.CPUPerGiB = cpu.Seconds() / (moved / (1 << 30))
	}
	return r, nil
}

// drive is the client: vroce-perf's streamClient.
func drive(cfg config, s io.ReadWriter) (*result, error) {
	r := &result{Test: cfg.test, Bytes: cfg.size, Iterations: cfg.iters, Verified: cfg.verify}
	buf := make([]byte, cfg.size)
	pattern(buf, 1)
	start := time.Now()
	if cfg.test == "stream_lat" {
		samples := make([]time.Duration, 0, cfg.iters)
		for i := range cfg.iters {
			if cfg.verify {
				pattern(buf, uint64(i))
			}
			t0 := time.Now()
			if _, err := s.Write(buf); err != nil {
				return nil, err
			}
			if _, err := io.ReadFull(s, buf); err != nil {
				return nil, err
			}
			samples = append(samples, time.Since(t0)/2)
			if cfg.verify && !isPattern(buf, uint64(i)) {
				return nil, fmt.Errorf("ping %d came back wrong", i)
			}
		}
		r.Seconds = time.Since(start).Seconds()
		slices.Sort(samples)
		n := len(samples)
		r.LatTypical = float64(samples[n/2]) / float64(time.Microsecond)
		r.LatP99 = float64(samples[min(n-1, n*99/100)]) / float64(time.Microsecond)
		r.MsgRate = float64(n) / r.Seconds / 1e6
		return r, nil
	}
	for i := range cfg.iters {
		if cfg.verify {
			pattern(buf, uint64(i))
		}
		if _, err := s.Write(buf); err != nil {
			return nil, err
		}
	}
	var receipt [1]byte
	if _, err := io.ReadFull(s, receipt[:]); err != nil {
		return nil, fmt.Errorf("receipt: %w", err)
	}
	if receipt[0] != 1 {
		return nil, errors.New("the server found the data wrong")
	}
	r.Seconds = time.Since(start).Seconds()
	r.BWAvg = float64(cfg.size) * float64(cfg.iters) / (1 << 20) / r.Seconds
	r.MsgRate = float64(cfg.iters) / r.Seconds / 1e6
	return r, nil
}

// serve is the server: vroce-perf's streamServer.
func serve(cfg config, s io.ReadWriter) error {
	buf := make([]byte, cfg.size)
	if cfg.test == "stream_lat" {
		for range cfg.iters {
			if _, err := io.ReadFull(s, buf); err != nil {
				return err
			}
			if _, err := s.Write(buf); err != nil {
				return err
			}
		}
		return nil
	}
	ok := byte(1)
	for i := range cfg.iters {
		if _, err := io.ReadFull(s, buf); err != nil {
			return err
		}
		if cfg.verify && !isPattern(buf, uint64(i)) {
			ok = 2
		}
	}
	_, err := s.Write([]byte{ok})
	return err
}

// pattern fills b with message i's bytes, vroce-perf's pattern.
func pattern(b []byte, i uint64) {
	var w [8]byte
	for off := 0; off < len(b); off += 8 {
		binary.LittleEndian.PutUint64(w[:], i<<32^uint64(off)^0x5bd1e995)
		copy(b[off:], w[:])
	}
}

func isPattern(b []byte, i uint64) bool {
	want := make([]byte, len(b))
	pattern(want, i)
	return string(want) == string(b)
}
