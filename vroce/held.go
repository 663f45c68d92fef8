package vroce

import (
	"math/bits"
	"sync"
	"sync/atomic"
)

// Out-of-order requests that selective repeat keeps until their turn
// (responder.hold) are untrusted input held in memory, so what they cost is
// bounded twice: each is kept in a buffer the size of what arrived (a
// power of two from 256 bytes), not of the device's largest packet (a
// stranger's 1,023 16-byte packets out of order pinned 40 MiB of 40 KiB
// buffers); and a QP holds at most maxHeldPerQP bytes, a device at most
// maxHeldPerDevice across its QPs. A request beyond either is dropped and
// counted (QPStats.HeldDrops): the requester resends what no SACK
// reported, so honest loss recovery only waits a little longer.
const (
	// maxHeldPerQP covers a window of 256 full 32 KiB packets, or the
	// whole 1,024-packet window at the 4096-byte MTU: past the
	// congestion windows honest loss leaves out of order.
	maxHeldPerQP = 8 << 20
	// maxHeldPerDevice bounds what every QP of a device holds together.
	maxHeldPerDevice = 64 << 20
	minHeldClass     = 8 // 256 bytes
)

// heldPool keeps held-packet buffers by size class; the device owns one.
type heldPool struct {
	classes [bits.UintSize]sync.Pool // *[]byte of cap 1 << class
	total   atomic.Int64             // bytes held by every QP of the device
}

// heldClass is the size class of a packet of n bytes: its buffer holds
// 1 << heldClass(n).
func heldClass(n int) int { return max(bits.Len(uint(n-1)), minHeldClass) }

// take returns a copy of raw in a buffer of its size class, and the bytes
// that costs; ok is false when the device holds its limit already.
func (h *heldPool) take(raw []byte) (buf *[]byte, cost int, ok bool) {
	c := heldClass(len(raw))
	cost = 1 << c
	if h.total.Add(int64(cost)) > maxHeldPerDevice {
		h.total.Add(-int64(cost))
		return nil, 0, false
	}
	if b, _ := h.classes[c].Get().(*[]byte); b != nil {
		buf = b
	} else {
		b := make([]byte, 0, cost)
		buf = &b
	}
	*buf = append((*buf)[:0], raw...)
	return buf, cost, true
}

// give returns a buffer take lent.
func (h *heldPool) give(buf *[]byte) {
	c := heldClass(cap(*buf))
	h.total.Add(-int64(1) << c)
	h.classes[c].Put(buf)
}
