// Command programs measures real, unmodified programs through a pair of
// rsock-proxys (client -> proxy -> vRoCE -> proxy -> server) against the
// same chain of proxies over kernel TCP, in one run: redis-benchmark
// against redis-server, iperf3, and wrk against nginx serving a 64 KiB
// file at several connection counts, and a 1 KiB echo at 8 to 3,000
// connections (the cost per request as streams grow); then the echo over
// the vRoCE chain alone at 200 and 10,000 streams, each against the
// first (-echo-scale).
//
//	make bench-programs    # or: go run ./bench/programs -proxy bin/rsock-proxy -runs 3
//
// As root (the benchmark of record) the servers and their proxy run in
// one network namespace and the clients and theirs in another, joined by
// a veth pair of MTU 1500, as two hosts, each side's processes pinned to
// a CPU of its own (taskset) where there are two; elsewhere, or with
// -link loopback, everything runs on this host's loopback, unpinned.
//
// The two chains differ only in the hop between the proxies. The vRoCE
// chain's client proxy runs with --no-fallback, so a connection that
// could not use vRoCE fails instead of being measured over TCP. Before
// measuring, each chain passes data checks: a 1 MiB redis value and the
// nginx file read back byte for byte, an iperf3 run without error; every
// measurement's own errors (wrk's socket errors and non-2xx answers,
// redis-benchmark's failures, an echo that differs) fail the run. The
// chains take turns, -runs times, and each row gives the median ratio to
// TCP and the spread over the runs.
//
// With -preload (make bench-preload) it measures issue 23's targets
// instead: a second set of the servers runs under vroce-run, and clients
// under vroce-run (socket and RDMA_CM modes, --no-fallback) reach them
// directly, beside the rsock-proxy pair, the TCP proxy chain, and
// vroce-perf's stream_bw (1 MiB) and stream_lat (64 B) between the same
// two places (preload.go).
package main
