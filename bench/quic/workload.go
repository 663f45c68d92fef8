package main

import (
	"slices"
	"time"

	"vroce.dev/internal/workload"
)

// measure runs cfg over t, both ends in this process: vroce-perf's
// client and server, from the package both commands share.
func measure(cfg config, t transport) (*result, error) {
	w := workload.Stream{Test: cfg.test, Size: cfg.size, Iters: cfg.iters, Verify: cfg.verify}
	client, finish, err := t.start(w.Server)
	if err != nil {
		return nil, err
	}
	cpu := workload.ProcessCPU()
	run, err := w.Client(client)
	cpu = workload.ProcessCPU() - cpu
	if ferr := finish(); err == nil {
		err = ferr
	}
	if err != nil {
		return nil, err
	}
	r := &result{Test: cfg.test, Provider: t.name(), Bytes: cfg.size, Iterations: cfg.iters, Verified: cfg.verify, Seconds: run.Elapsed.Seconds()}
	r.MsgRate = float64(cfg.iters) / r.Seconds / 1e6
	if cfg.test == "stream_lat" {
		// As vroce-perf: typical is the median, then the 99th percentile.
		us := slices.Sorted(slices.Values(run.Samples))
		n := len(us)
		r.LatTypical = float64(us[n/2]) / float64(time.Microsecond)
		r.LatP99 = float64(us[min(n-1, n*99/100)]) / float64(time.Microsecond)
		return r, nil
	}
	moved := float64(cfg.size) * float64(cfg.iters)
	r.BWAvg = moved / (1 << 20) / r.Seconds
	if cpu > 0 {
		r.CPUPerGiB = cpu.Seconds() / (moved / (1 << 30))
	}
	return r, nil
}
