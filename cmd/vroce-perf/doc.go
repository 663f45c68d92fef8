// Command vroce-perf measures vRoCE the way perftest measures RDMA devices:
// bandwidth and latency of SEND, RDMA WRITE, RDMA READ and atomics between
// two devices, optionally next to the same workload over kernel TCP.
//
//	vroce-perf write_bw                      # server: waits for a client
//	vroce-perf write_bw -s 65536 HOST        # client
//	vroce-perf send_lat --loopback --compare tcp
//	vroce-perf write_bw --oob perftest HOST  # against ib_write_bw on HOST
//
// The two ends exchange QP numbers, PSNs, keys and addresses over a TCP
// control connection (port 18515 by default, as perftest), which the
// --compare tcp run then reuses. With --oob it speaks another tool's
// exchange instead, to stand in for one end of rdma-core's
// ibv_rc_pingpong, ibv_ud_pingpong (pingpong.go) and ibv_srq_pingpong
// (srqpingpong.go) or perftest (perftest.go, perftest_cm.go for -R)
// against any RoCE peer; rping (rping.go) and udaddy (udaddy.go) are
// librdmacm's, over RDMA_CM.
package main
