// Package testkit is where the module's test kits live, above everything
// they test: verbstest (devices, RC pairs and completions for tests that
// go through the verbs), providertest (the conformance suite every packet
// provider runs), netnstest (network namespaces and veth pairs for the
// tests that need root), streamtest (echo checks of byte streams, and
// a buffer safe to read while written) and race (whether the race
// detector is built in, for the allocation counts). The primitives the code itself is built from
// (clock, fifo, minheap, pcap, rtt, secrand) sit beside it in internal/,
// below vroce. Nothing outside tests imports a kit.
package testkit
