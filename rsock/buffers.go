package rsock

import (
	"fmt"

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
	smallBufSize     = 4 << 10
	maxIdleSmallBufs = 4096
)

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
		free, limit = &s.freeSmall, maxIdleSmallBufs
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
