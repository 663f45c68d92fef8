// Package ring moves datagrams between two processes through shared
// memory: the packet path of an out-of-process provider (see
// vroce.dev/providers/plugin), which go-plugin's RPCs are far too slow for.
//
// A Region is one memfd, sealed against resizing, mapped by both
// processes. It holds two rings, one each way. A ring is a byte area of
// variable-length slots with one producer and one consumer; each side's
// index lives on a cache line of its own, so neither side writes a line
// the other writes. A slot carries a datagram and the peer's address.
//
// Doorbells are eventfds. A side that finds nothing to do and is about to
// sleep says so in the ring, checks once more, then waits on its doorbell;
// the other side rings only when it sees that flag, so a busy ring costs
// no system call per packet. A full ring makes its producer wait for
// room: nothing is dropped.
//
// The other process is not trusted. Every index and slot header read from
// shared memory is checked before use (decodeSlot, fuzzed), a bad one
// poisons the ring with an error wrapping ErrCorrupt, and payloads are
// copied out, never lent, so the other side cannot change a packet after
// it was checked.
package ring
