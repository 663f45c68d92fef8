// Package wire is the RoCEv2 packet codec: the InfiniBand base transport
// header (BTH), the extended transport headers (RETH, AETH, DETH, ImmDt,
// IETH, AtomicETH, AtomicAckETH), the RC and UD opcodes, pad counts and the
// invariant CRC (ICRC) exactly as Linux rdma_rxe computes it.
//
// The package has no state and does no I/O. Decoding never allocates and
// never panics: hostile bytes produce a *ParseError. Encoding writes into a
// buffer the caller owns, so the transport can build packets straight into
// a provider's send buffers.
//
// A RoCEv2 packet, as carried in a UDP datagram to port 4791, is
//
//	BTH | extension headers (by opcode) | payload | pad (0-3) | ICRC (4)
//
// Three vRoCE extensions, negotiated per connection, keep the packet as
// RoCEv2 decoders parse it: SACK blocks after an ACK's AETH (ParseSACK),
// a PiggyACK trailer after an RC request's payload, flagged by a
// reserved BTH bit, and zeros where the ICRC goes when both ends leave
// integrity to the UDP checksum (Sealer.UDPChecksum).
//
// Parse splits such a datagram into a Packet; Packet.EncodeHeaders writes
// the headers of one; a Sealer (or a Flow) seals and checks the ICRC over
// the datagram and the IP/UDP headers it travelled in, rebuilt from the
// addresses, and CheckICRC checks it over headers a provider saw.
// CheckUnknownID checks a packet whose IPv4 ID the receiver cannot see.
package wire
