// Command page measures vRoCE against kernel TCP across message sizes, in
// one run on this machine, and writes the results page: bench/README.md
// with tables, bench/throughput.svg and bench/latency.svg. The stream
// workloads run over quic-go too, with quic-perf (bench/quic).
//
//	make bench-page        # or: go run ./bench/page -perf bin/vroce-perf -quic bin/quic-perf -out bench
//
// With -targets it writes no page: it runs the data path's four targets
// (issue 7) -runs times each and prints every run's figure and the median
// against the target, since one run on a shared machine says little.
//
//	make bench-targets     # or: go run ./bench/page -targets -runs 7
//
// Every point is vroce-perf with --compare tcp: the vRoCE figure and the
// TCP figure come from the same process, seconds apart. Each point is run
// -runs times and the run whose vRoCE/TCP ratio is the median is kept,
// so that one disturbed run on a shared machine does not make the table.
// quic-perf likewise runs its QUIC figure and a TCP figure of its own in
// one process, and the quic-go/TCP ratio is that run's.
package main
