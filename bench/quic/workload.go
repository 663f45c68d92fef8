package main

import "vroce.dev/internal/workload"

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
		l := workload.Summarize(run.Samples)
		r.LatTypical, r.LatP99 = l.Typical, l.P99
		return r, nil
	}
	moved := float64(cfg.size) * float64(cfg.iters)
	r.BWAvg = moved / (1 << 20) / r.Seconds
	r.CPUPerGiB = workload.CPUPerGiB(cpu, moved)
	return r, nil
}
