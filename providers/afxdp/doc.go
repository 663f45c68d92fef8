// Package afxdp is the kernel-bypass vRoCE provider: RoCEv2 frames move
// between a NIC's queues and user space through AF_XDP sockets, with no
// socket layer, no skb and no system call per packet.
//
// Opening a provider attaches a small XDP program (written with
// cilium/ebpf's asm package, so nothing is compiled outside Go) to the
// interface (one device per interface). It redirects UDP datagrams for
// the device's address and port, IPv4 or IPv6,
// to the AF_XDP socket of the queue they arrived on and passes everything
// else, ARP and neighbour discovery included, to the kernel. There is one
// socket, with its own UMEM and four rings, per receive queue, so an
// interface with several queues loses nothing whichever queue a flow is
// hashed to. The program is attached in driver mode where the driver has
// XDP and in generic mode where not (Options.Generic or
// VROCE_XDP_MODE=generic forces generic), through a BPF link that the kernel
// removes when the process ends, however it ends; a program of ours that an
// older netlink attachment left behind is found by name and replaced on the
// next Open. Another program on the interface is never replaced.
//
// The provider builds and checks the Ethernet, IP and UDP headers itself:
// UDP checksums are set and verified, IPv4 goes out with ID 0 and DF set,
// as the udp provider's packets do, so the ICRC holds end to end and the
// two providers interoperate. The next hop's MAC comes from the kernel's
// route and neighbour tables; a neighbour the kernel does not know yet is
// resolved by the kernel while the first packets to it wait.
//
// Deleting the interface under a device fails the provider with an error
// wrapping vroce.ErrProviderFailed, which the device reports as
// EventDeviceFatal.
//
// A frame is one 4 KiB UMEM chunk less the kernel's XDP headroom, so the
// largest path MTU over AF_XDP is 2048 (a 4096-byte path MTU does not fit
// in one chunk).
//
// A veth hands XDP the packets its peer's stack sent with their UDP
// checksum still partial (a NIC completes it on the wire): they count as
// Stats().RxBadChecksum and are dropped. Turn transmit checksum offload off
// on the peer (ethtool -K PEER tx off).
//
// Selecting it:
//
//	VROCE_PROVIDER=afxdp VROCE_IFACE=eth0 ./server
//
// or in code, vroce.Config{Provider: "afxdp", Addr: "10.0.0.1:4791",
// ProviderOptions: afxdp.Options{Iface: "eth0"}}. The device's address must
// be one of the interface's; an unspecified host picks its first. It needs
// CAP_NET_RAW, CAP_NET_ADMIN and CAP_BPF (or root), and Linux 5.9 or later;
// without them Open says which is missing. Importing the package registers
// the provider "afxdp".
package afxdp
