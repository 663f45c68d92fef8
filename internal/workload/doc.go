// Package workload is what vroce-perf and quic-perf (bench/quic) both
// run, so that their figures compare like with like: the stream
// workloads' client and server, the pattern that makes every message
// checkable, and the process's CPU time.
package workload
