package vroce

import (
	"unsafe"

	"vroce.dev/vroce/wire"
)

// txBatch collects packets to send in one provider call. Its buffers are
// allocated once and reused: building a packet allocates nothing.
//
// The buffers lie end to end in chunks: a packet that may be coalesced
// with its neighbours (Packet.Coalesce) is followed at once by the next
// one's buffer, so that a run of them, sent as one segmented datagram,
// is one piece of memory and the kernel copies it in one go. Copying
// each of 24-45 segments from a piece of its own cost the kernel a fifth
// to a half more CPU a byte on 2026-12-05's first-generation Zen (each
// piece is a call with its own SMAP toggles and return thunk). Any other
// packet's buffer starts on 64 bytes (aliased4K says why).
type txBatch struct {
	pkts   []Packet
	flows  []wire.Flow
	chunks [][]byte // allocated as packets need them, kept across resets
	chunk  int      // the size of each
	end    bufAt    // where the last packet's bytes end
	next   bufAt    // where buf() put the next packet's buffer
	cur    []byte   // that buffer, which the next add fills
	size   int      // of each buffer: the device's largest packet
}

// bufAt is a place in a txBatch's chunks.
type bufAt struct{ chunk, off int }

func newTxBatch(n, size int) *txBatch {
	n = max(n, 1)
	// A whole segmented datagram (at most 64 KiB) fits in a chunk, and
	// at least two packets of any size.
	chunk := max(64<<10, 2*(size+63))
	return &txBatch{pkts: make([]Packet, 0, n), flows: make([]wire.Flow, 0, n), chunk: chunk, size: size}
}

func (b *txBatch) full() bool { return len(b.pkts) == cap(b.pkts) }

func (b *txBatch) reset() {
	clear(b.pkts) // let go of lent memory
	b.pkts = b.pkts[:0]
	b.flows = b.flows[:0]
	b.end, b.next = bufAt{}, bufAt{}
}

// buf returns the buffer for the next packet, size bytes, where the last
// packet's bytes end if that packet may be coalesced, else on the next 64
// bytes; the caller must not hold a full batch (flush first). Calling it
// again before a packet is added returns the same buffer.
func (b *txBatch) buf() []byte {
	at := b.end
	if n := len(b.pkts); n == 0 || !b.pkts[n-1].Coalesce {
		at.off = (at.off + 63) &^ 63
	}
	if at.off+b.size > b.chunk {
		at = bufAt{chunk: at.chunk + 1}
	}
	if at.chunk == len(b.chunks) {
		b.chunks = append(b.chunks, make([]byte, b.chunk))
	}
	b.next = at
	b.cur = b.chunks[at.chunk][at.off : at.off+b.size : at.off+b.size]
	return b.cur
}

// used records that the packet being added took the first n bytes of
// its buffer.
func (b *txBatch) used(n int) { b.end = bufAt{b.next.chunk, b.next.off + n} }

// add seals the packet of length n built in buf() and queues it on flow.
func (b *txBatch) add(flow wire.Flow, n int) {
	data := b.cur[:n]
	flow.Seal(data)
	b.used(n)
	b.pkts = append(b.pkts, Packet{Data: data, Addr: flow.Dst})
	b.flows = append(b.flows, flow)
}

// A packet of a QP's is counted in its QPStats.TxPackets where it is
// added (addLent, addSealed; UD's add), under the QP's lock: a batch may
// hold several QPs' packets, and whoever finds it full sends them all.

// push queues p, a packet of qp's sealed in the batch's next buffer, on
// qp's flow.
func (b *txBatch) push(qp *QP, p Packet) {
	p.Addr = qp.flow.Dst
	b.pkts = append(b.pkts, p)
	b.flows = append(b.flows, qp.flow)
	qp.stats.TxPackets++
}

// addLent queues a packet of qp's built in buf() with hl bytes of headers,
// whose payload body is lent from registered memory: the provider sends
// it from there, then the rest of the buffer: trailer bytes already
// written after the headers, the pad and the ICRC.
func (b *txBatch) addLent(qp *QP, hl int, body []byte, trailer int) {
	buf := b.cur
	tail := buf[hl : hl+trailer+wire.PadCount(len(body))+wire.ICRCLen]
	clear(tail[trailer:])
	head := buf[:hl:hl]
	qp.txSeal.SealSplit(head, body, tail)
	b.used(hl + len(tail))
	b.push(qp, Packet{Data: head, Body: body, Tail: tail, Coalesce: qp.attr.SelectiveRepeat})
}

// addCopied queues a packet of qp's built in buf() with hl bytes of
// headers and the trailer bytes already written after where body goes:
// body is copied in behind the headers as the ICRC reads it, one pass
// over the payload for both (wire.Sealer.SealCopy).
func (b *txBatch) addCopied(qp *QP, hl int, body []byte, trailer int) {
	buf := b.cur
	n := len(body)
	tail := buf[hl+n : hl+n+trailer+wire.PadCount(n)+wire.ICRCLen]
	clear(tail[trailer:])
	qp.txSeal.SealCopy(buf[:hl], buf[hl:hl+n], body, tail)
	b.used(hl + n + len(tail))
	b.push(qp, Packet{Data: buf[:hl+n+len(tail)], Coalesce: qp.attr.SelectiveRepeat})
}

// joinLone copies the payload of a batch's only packet, lent from
// registered memory, in behind its headers when the kernel would copy it
// from there slowly (aliased4K). That is the latency case: a lone
// datagram, into memory the kernel reuses hot. In a batch of several
// the kernel writes memory it has not touched lately, which costs what
// the aliasing would, and the copy here would only add to the sender's
// work (measured: 64 KiB RDMA WRITEs took 14% more CPU per GiB).
func (b *txBatch) joinLone() {
	if len(b.pkts) != 1 {
		return
	}
	p := &b.pkts[0]
	if len(p.Body) == 0 || !aliased4K(len(p.Data), p.Body) {
		return
	}
	buf := b.chunks[0][:b.size] // the packet's, the batch's first: Data and Tail are in it
	hl, n, t := len(p.Data), len(p.Body), len(p.Tail)
	copy(buf[hl+n:hl+n+t], p.Tail) // the tail follows the headers: out of the payload's way first
	copy(buf[hl:hl+n], p.Body)
	p.Data, p.Body, p.Tail = buf[:hl+n+t], nil, nil
}

// aliased4K reports whether body, sent hl bytes into a datagram, would
// reach the kernel's copy just behind where it goes, modulo 4 KiB. x86
// Linux copies from user memory with REP MOVSB, which crawls when the
// destination runs 1-63 bytes ahead of the source in the low 12 address
// bits (loads alias the stores before them), and it lays a large
// datagram out with its payload starting on a page: a payload lent from
// a page-aligned buffer behind a 12-28-byte header is that case. A
// packet's buffer starts on 64 bytes, unless it follows one it may be
// coalesced with (buf), so the kernel copies a packet sent whole from one
// at full speed.
func aliased4K(hl int, body []byte) bool {
	r := (hl - int(uintptr(unsafe.Pointer(unsafe.SliceData(body))))) & 4095
	return r > 0 && r < 64
}

// addFor is add for a packet of qp's, sealed by the QP's Sealer: one a
// vRoCE peer receives (the QP negotiated selective repeat) may be
// coalesced by the provider.
func (b *txBatch) addFor(qp *QP, n int) { b.addSealed(qp, n, qp.attr.SelectiveRepeat) }

// addSealed is add for a packet of qp's, sealed by the QP's Sealer.
func (b *txBatch) addSealed(qp *QP, n int, coalesce bool) {
	data := b.cur[:n]
	qp.txSeal.Seal(data)
	b.used(n)
	b.push(qp, Packet{Data: data, Coalesce: coalesce})
}
