package rsock

import (
	"fmt"
	"slices"

	"vroce.dev/vroce"
)

// A stack's registered buffers: the pools of free send and receive
// buffers, and the SRQ kept topped up with receives.

// The receive side of every stream of a device is shared: one SRQ holds
// buffers of bufSize bytes, kept topped up by the device's poller, and a
// stream may have at most the credits it granted its peer worth of them
// filled and unread. Small messages are copied out at once, so an
// unread request costs its size, not a buffer.
const (
	bufSize = 64 << 10
	// window is the credits a stream grants: messages in flight towards
	// it, at most 1 MiB of buffers a slow reader holds. With 8, a
	// loopback stream of 64 KiB writes waited for credits (1,575 against
	// 1,932 MiB/s in 5 interleaved runs); 32 gained nothing more.
	window    = 16
	minPosted = 32
	maxPosted = 1024
	smallCopy = 2 << 10
	// maxIdleBufs bounds the buffers a stack keeps free for reuse.
	maxIdleBufs = 256
	// smallBufSize is the send buffer of a write that fits one and can
	// leave at once. With a 64 KiB buffer held per message in flight, a
	// thousand request/response streams through one proxy outran
	// maxIdleBufs and allocated and registered a buffer per request
	// (perf: page clearing and GC, 8% of the proxy's CPU).
	smallBufSize = 4 << 10
	// minIdleSmallBufs is the fewest small buffers a stack keeps free;
	// idleSmallPerStream more for each open stream (idleSmallLimitLocked).
	minIdleSmallBufs   = 4096
	idleSmallPerStream = 2
)

// idleSmallLimitLocked is how many small buffers the stack keeps free. A
// stream that copies from a reader (CopyFrom: rsock-proxy, vroced) holds
// one while it waits in Read and another until its last message is
// sent, so the number in use swings by up to two a stream. With a fixed
// 4,096 kept, 10,000 1 KiB echo streams through two proxies freed and
// registered afresh a buffer every few requests (page faults 3% of the
// proxies' CPU, against 0.2% at 200 streams). Keeping two a stream, six
// interleaved pairs of runs between two namespaces, each faster: 18.4,
// 18.1, 22.7, 23.0, 12.4, 13.6 thousand requests/s against 16.4, 16.5,
// 22.6, 16.9, 11.6, 9.8 (the machine's own speed moved 2x in the hour),
// and 31-54 us of a proxy's CPU a request against 32-64. The memory
// kept is what those streams had in use at once.
func (s *stack) idleSmallLimitLocked() int {
	return max(minIdleSmallBufs, idleSmallPerStream*len(s.streams))
}

// buffer is registered memory for one message.
type buffer struct {
	mr   *vroce.MR
	data []byte
	n    int          // bytes in use
	sgl  [1]vroce.SGE // for posting without allocating
}

func (b *buffer) sge(n int) []vroce.SGE {
	b.sgl[0] = b.mr.SGE(0, n)
	return b.sgl[:]
}

// getBuf returns a free registered buffer.
func (s *stack) getBuf() (*buffer, error) { return s.takeBuf(&s.free, bufSize) }

// getSmallBuf returns a send buffer of smallBufSize bytes.
func (s *stack) getSmallBuf() (*buffer, error) { return s.takeBuf(&s.freeSmall, smallBufSize) }

func (s *stack) takeBuf(free *[]*buffer, size int) (*buffer, error) {
	s.mu.Lock()
	if n := len(*free); n > 0 {
		b := (*free)[n-1]
		*free = (*free)[:n-1]
		s.mu.Unlock()
		return b, nil
	}
	s.mu.Unlock()
	return s.newBuf(size)
}

// newBuf registers a fresh buffer of size bytes.
func (s *stack) newBuf(size int) (*buffer, error) {
	data := make([]byte, size)
	mr, err := s.pd.RegMR(data, vroce.AccessLocalWrite)
	if err != nil {
		return nil, fmt.Errorf("rsock: buffer: %w", err)
	}
	return &buffer{mr: mr, data: data}, nil
}

// putBuf keeps b for reuse, in the list of its size, or deregisters it.
func (s *stack) putBuf(b *buffer) {
	b.n = 0
	s.mu.Lock()
	free, limit := &s.free, maxIdleBufs
	if len(b.data) == smallBufSize {
		free, limit = &s.freeSmall, s.idleSmallLimitLocked()
	}
	if len(*free) < limit {
		*free = append(*free, b)
		b = nil
	}
	s.mu.Unlock()
	if b != nil {
		b.mr.Dereg()
	}
}

// trimIdleSmallLocked takes the small buffers kept free beyond the limit
// (after streams closed) off the list, for the caller to deregister
// without the stack's lock.
func (s *stack) trimIdleSmallLocked() []*buffer {
	limit := s.idleSmallLimitLocked()
	if len(s.freeSmall) <= limit {
		return nil
	}
	excess := slices.Clone(s.freeSmall[limit:])
	clear(s.freeSmall[limit:])
	s.freeSmall = s.freeSmall[:limit]
	return excess
}

// replenishLocked posts receives until target are outstanding.
func (s *stack) replenishLocked() error {
	for s.posted < s.target {
		var b *buffer
		if n := len(s.free); n > 0 {
			b, s.free = s.free[n-1], s.free[:n-1]
		} else {
			var err error
			if b, err = s.newBuf(bufSize); err != nil {
				return err
			}
		}
		var slot uint32
		if n := len(s.rxFree); n > 0 {
			slot, s.rxFree = s.rxFree[n-1], s.rxFree[:n-1]
			s.rx[slot] = b
		} else {
			slot = uint32(len(s.rx))
			s.rx = append(s.rx, b)
		}
		if err := s.srq.PostRecv(vroce.RecvWR{ID: uint64(slot), SGL: b.sge(bufSize)}); err != nil {
			s.rx[slot] = nil
			s.rxFree = append(s.rxFree, slot)
			s.free = append(s.free, b)
			return fmt.Errorf("rsock: post receive: %w", err)
		}
		s.posted++
	}
	return nil
}

// takeRx returns the buffer of a completed receive.
func (s *stack) takeRx(id uint64) *buffer {
	if id >= uint64(len(s.rx)) {
		return nil
	}
	b := s.rx[id]
	s.rx[id] = nil
	s.rxFree = append(s.rxFree, uint32(id))
	s.posted--
	return b
}
