// Package rxe tests vRoCE against Linux Soft-RoCE for real: its tests
// build a small guest from Debian's packages (the 6.1 kernel's rdma_rxe,
// rdma-core's and perftest's tools, busybox; guest/build.sh), boot it once
// under qemu on a tap in a network namespace of their own, and run
// ibv_rc_pingpong, ibv_ud_pingpong, ibv_srq_pingpong, ib_write_bw,
// ib_read_bw, ib_send_bw, ib_send_lat (over TCP and with -R),
// ib_write_lat, ib_read_lat, ib_atomic_bw, ib_atomic_lat, rping and udaddy
// in the guest against
// vroce-perf on the host, each end as server and as client, over IPv4 and
// IPv6. They need root and qemu-system-x86, busybox-static, cpio and kmod,
// and skip elsewhere saying so; CI runs them (make test), and make interop
// runs them verbosely on a freshly built guest.
//
// The guest's /init serves commands on TCP port 7000, one command line per
// connection with its output streamed back, so one boot serves the whole
// run: under software emulation a boot costs about 15 seconds, a case one
// or two.
package rxe
