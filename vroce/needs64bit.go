//go:build 386 || arm || mips || mipsle

package vroce

// vRoCE runs on 64-bit platforms only. Its limits (2 GiB messages, 1 TiB
// memory regions) and its counters are ints and words that a 32-bit
// platform cannot hold, and the cloud instances it serves are 64-bit.
// This line fails to compile so that a 32-bit build says so by name,
// rather than by an overflow somewhere in the limits.
var _ = vRoCE_needs_a_64_bit_platform
