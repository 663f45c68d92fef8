package main

import "vroce.dev/internal/workload"

// measure runs w over t, both ends in this process: vroce-perf's client
// and server, from the package both commands share.
func measure(w workload.Stream, t transport) (*result, error) {
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
	r := &result{Test: w.Test, Provider: t.name(), Bytes: w.Size, Iterations: w.Iters, Verified: w.Verify, Seconds: run.Elapsed.Seconds()}
	r.MsgRate = float64(w.Iters) / r.Seconds / 1e6
	if w.Test == "stream_lat" {
		l := workload.Summarize(run.Samples)
		r.LatTypical, r.LatP99 = l.Typical, l.P99
		return r, nil
	}
	moved := float64(w.Size) * float64(w.Iters)
	r.BWAvg = moved / (1 << 20) / r.Seconds
	r.CPUPerGiB = workload.CPUPerGiB(cpu, moved)
	return r, nil
}
