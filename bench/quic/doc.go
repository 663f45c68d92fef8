// Command quic-perf runs vroce-perf's two stream workloads over a quic-go
// stream, and in the same run over kernel TCP, both ends in this process
// on loopback, so that the results page can set vRoCE beside the other
// user-space transport over UDP that our users weigh it against.
//
//	quic-perf stream_bw  -s 65536 -n 16000 [--json] [--verify]
//	quic-perf stream_lat -s 64 -n 10000
//
// The workloads are vroce-perf's own, from vroce.dev/internal/workload:
// stream_bw writes -n messages of -s bytes and times them to the
// reader's one-byte receipt; stream_lat ping-pongs -s bytes and reports
// half of each round trip. The CPU per
// GiB is this process's user and system time, both ends', as vroce-perf
// --loopback reports it.
//
// It is a module of its own (vroce.dev/bench/quic, with vroce.dev
// replaced by this checkout) so that quic-go stays out of vroce.dev's
// dependencies: only this benchmark needs it.
package main
