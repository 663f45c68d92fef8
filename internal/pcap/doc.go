// Package pcap reads and writes classic libpcap capture files with Ethernet
// link type, and builds and takes apart the Ethernet/IP/UDP framing around a
// RoCEv2 datagram. vroce uses it to record what a device sends and receives
// (VROCE_PCAP); tests use it to read the rdma_rxe reference captures.
package pcap
