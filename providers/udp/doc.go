// Package udp is the default vRoCE provider: RoCEv2 datagrams over an
// ordinary, unprivileged UDP socket, IPv4 or IPv6, received and sent in
// batches (recvmmsg/sendmmsg on Linux). Any number of devices can share a
// host: each binds its own address and port (4791 by default).
//
// On Linux, runs of packets to a vRoCE peer leave as one segmented
// datagram (UDP GSO) and arrive coalesced (UDP GRO), and neither sending
// nor receiving allocates: recvmmsg and sendmmsg are called directly
// through the runtime's poller, on headers the provider owns. Where the
// kernel or the route cannot segment, it falls back. A message's pieces
// that lie one right after the other in memory (a run the engine laid end
// to end) go to the kernel as one iovec: it copies one piece far more
// cheaply than one per segment.
//
// The socket sets DF (IP_PMTUDISC_DO): Linux then sends IPv4 ID 0 from an
// unconnected socket, which is what lets a receiver rebuild the IP header
// the ICRC covers (see vroce/wire.Flow) and what rdma_rxe needs to accept
// our packets. The kernel also sets and checks the UDP checksum for us,
// which is why the provider says it verifies it (VerifiesUDPChecksum):
// two vRoCE devices on it leave the ICRC to that checksum.
//
// Importing the package registers the provider "udp".
package udp
