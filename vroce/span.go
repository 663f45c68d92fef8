package vroce

// Spans of registered memory, and copying a message into and out of the
// spans its scatter/gather list names.

// span is a validated piece of registered memory.
type span struct {
	mr  *MR
	off int
	n   int
}

// bytes is the span's memory; the empty span (a zero-length access, which
// names no MR) has none.
func (s span) bytes() []byte {
	if s.mr == nil {
		return nil
	}
	return s.mr.buf[s.off : s.off+s.n]
}

// scatter copies src into a scatter list (first, then more), starting off
// bytes in. A list whose first span names no MR is empty. Plain loops, not
// an iterator: a func value's loop body moves what it captures to the heap,
// three allocations a packet.
func scatter(first span, more []span, src []byte, off int) {
	if first.mr == nil {
		return
	}
	src, off = scatterOne(first, src, off)
	for _, s := range more {
		if len(src) == 0 {
			return
		}
		src, off = scatterOne(s, src, off)
	}
}

func scatterOne(s span, src []byte, off int) ([]byte, int) {
	if off >= s.n {
		return src, off - s.n
	}
	n := copy(s.bytes()[off:], src)
	return src[n:], 0
}

// within returns the n bytes off bytes into a scatter list (first, then
// more) when one span holds them all.
func within(first span, more []span, off, n int) ([]byte, bool) {
	if first.mr == nil {
		return nil, false
	}
	s, next := first, more
	for off >= s.n {
		if len(next) == 0 {
			return nil, false
		}
		off -= s.n
		s, next = next[0], next[1:]
	}
	if off+n > s.n {
		return nil, false
	}
	return s.bytes()[off : off+n], true
}

// gather copies from a gather list (first, then more), starting off bytes
// in, into dst.
func gather(first span, more []span, dst []byte, off int) {
	if first.mr == nil {
		return
	}
	dst, off = gatherOne(first, dst, off)
	for _, s := range more {
		if len(dst) == 0 {
			return
		}
		dst, off = gatherOne(s, dst, off)
	}
}

func gatherOne(s span, dst []byte, off int) ([]byte, int) {
	if off >= s.n {
		return dst, off - s.n
	}
	n := copy(dst, s.bytes()[off:])
	return dst[n:], 0
}
