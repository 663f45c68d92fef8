//go:build linux

package ring

import (
	"encoding/binary"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"vroce.dev/internal/nonblock"
)

// Producer writes datagrams into one ring of a Region. One goroutine at
// a time: the caller serialises (a provider's Send may be called from
// several).
type Producer struct {
	q      ring
	data   *Doorbell // rung to wake a sleeping consumer
	room   *Doorbell // waited on when the area is full
	maxLen int
	head   uint64 // written so far, published or not; the producer's own
	tail   uint64 // the consumer's index as last read
	closed atomic.Bool
	err    error // sticky: the ring is corrupt
}

// Consumer reads datagrams from one ring of a Region. One goroutine at a
// time.
type Consumer struct {
	q       ring
	data    *Doorbell // waited on when the area is empty
	room    *Doorbell // rung to wake a producer that waits for room
	maxLen  int
	tail    uint64 // read so far, released or not; the consumer's own
	head    uint64 // the producer's index as last read
	closed  atomic.Bool
	err     error // sticky: the ring is corrupt
	dropped atomic.Uint64
}

// Producer returns the producer of ring i of r (0 or 1), which rings data
// when it publishes to a sleeping consumer and waits on room when full.
// maxLen bounds a datagram.
func (r *Region) Producer(i int, data, room *Doorbell, maxLen int) *Producer {
	q := r.ring(i)
	p := &Producer{q: q, data: data, room: room, maxLen: maxLen}
	p.head, p.tail = q.head.Load(), q.tail.Load()
	return p
}

// Consumer returns the consumer of ring i of r, the Producer's pair.
func (r *Region) Consumer(i int, data, room *Doorbell, maxLen int) *Consumer {
	q := r.ring(i)
	c := &Consumer{q: q, data: data, room: room, maxLen: maxLen}
	c.tail, c.head = q.tail.Load(), q.head.Load()
	return c
}

// TryPut writes a datagram, the concatenation of a, b and c, without
// publishing it (Publish does, for a batch at once). It reports false
// when the area has no room for it now.
func (p *Producer) TryPut(m Meta, a, b, c []byte) (bool, error) {
	if p.closed.Load() {
		return false, net.ErrClosed
	}
	if p.err != nil {
		return false, p.err
	}
	n := len(a) + len(b) + len(c)
	if n > p.maxLen {
		return false, fmt.Errorf("ring: a %d-byte datagram, larger than %d", n, p.maxLen)
	}
	size := uint64(len(p.q.area))
	need := slotSize(n)
	pos := p.head % size
	if pos+need > size {
		need += size - pos // the wrap mark's padding first
	}
	if size-(p.head-p.tail) < need {
		tail := p.q.tail.Load()
		if _, err := p.q.published(p.head, tail); err != nil || tail < p.tail {
			p.err = fmt.Errorf("%w: the consumer's index went from %d to %d (head %d)", ErrCorrupt, p.tail, tail, p.head)
			return false, p.err
		}
		p.tail = tail
		if size-(p.head-p.tail) < need {
			return false, nil
		}
	}
	if pos+slotSize(n) > size {
		binary.LittleEndian.PutUint32(p.q.area[pos:], wrapMark)
		p.head += size - pos
		pos = 0
	}
	s := p.q.area[pos : pos+slotSize(n)]
	putHeader(s, n, m)
	w := slotHeader
	w += copy(s[w:], a)
	w += copy(s[w:], b)
	copy(s[w:], c)
	p.head += slotSize(n)
	return true, nil
}

// Publish makes what TryPut wrote visible, and wakes the consumer if it
// said it sleeps.
func (p *Producer) Publish() error {
	p.q.head.Store(p.head)
	if p.q.consumerSleeps.CompareAndSwap(1, 0) {
		return p.data.Ring()
	}
	return nil
}

// Put writes and publishes one datagram, waiting for room as long as the
// area is full: nothing is dropped.
func (p *Producer) Put(m Meta, a, b, c []byte) error {
	for {
		ok, err := p.TryPut(m, a, b, c)
		if err != nil || ok {
			if err == nil {
				err = p.Publish()
			}
			return err
		}
		if err := p.WaitRoom(); err != nil {
			return err
		}
	}
}

// WaitRoom publishes what is written and sleeps until the consumer
// releases some of the area (or Close). The caller tries again after.
func (p *Producer) WaitRoom() error {
	if err := p.Publish(); err != nil {
		return err
	}
	p.q.producerWaits.Store(1)
	if p.q.tail.Load() != p.tail || p.closed.Load() {
		// Released since it looked, or closing: try again now.
		p.q.producerWaits.Store(0)
	} else if err := p.room.Wait(); err != nil && !p.closed.Load() {
		return err
	}
	if p.closed.Load() {
		return net.ErrClosed
	}
	return nil
}

// Close makes the producer's calls fail with net.ErrClosed and wakes one
// waiting for room. The doorbells stay open: their owner closes them.
func (p *Producer) Close() {
	p.closed.Store(true)
	p.room.Ring()
}

// TryGet copies the next datagram into dst and returns its Meta and
// length; ok is false when there is none now. A datagram longer than dst
// is dropped and counted (Dropped). What it read is not released until
// Release.
func (c *Consumer) TryGet(dst []byte) (m Meta, n int, ok bool, err error) {
	m, d, ok, err := c.next(len(dst))
	if !ok {
		return m, 0, false, err
	}
	return m, copy(dst, d), true, nil
}

// TryLend is TryGet without the copy: the datagram stays in the ring,
// readable until Release. The producer's process can still write there,
// so only a reader that needs no checked copy may use it: one that hands
// the bytes on as they are (to the kernel, say).
func (c *Consumer) TryLend() (m Meta, d []byte, ok bool, err error) {
	return c.next(c.maxLen)
}

// next finds the next datagram of at most room bytes in the area.
func (c *Consumer) next(room int) (m Meta, d []byte, ok bool, err error) {
	if c.err != nil {
		return m, nil, false, c.err
	}
	size := uint64(len(c.q.area))
	for {
		if c.tail == c.head {
			head := c.q.head.Load()
			if _, err := c.q.published(head, c.tail); err != nil || head < c.head {
				c.err = fmt.Errorf("%w: the producer's index went from %d to %d (tail %d)", ErrCorrupt, c.head, head, c.tail)
				return m, nil, false, c.err
			}
			c.head = head
			if c.tail == c.head {
				return m, nil, false, nil
			}
		}
		m, start, n, advance, err := decodeSlot(c.q.area, c.tail%size, c.head-c.tail, c.maxLen)
		if err != nil {
			c.err = err
			return m, nil, false, err
		}
		c.tail += advance
		if n < 0 {
			continue // the wrap mark
		}
		if n > room {
			c.dropped.Add(1)
			continue
		}
		return m, c.q.area[start : start+n : start+n], true, nil
	}
}

// Release gives back the area of what TryGet has read, and wakes the
// producer if it waits for room.
func (c *Consumer) Release() error {
	c.q.tail.Store(c.tail)
	if c.q.producerWaits.CompareAndSwap(1, 0) {
		return c.room.Ring()
	}
	return nil
}

// Dropped counts datagrams too long for the buffer TryGet was given.
// Any goroutine may call it.
func (c *Consumer) Dropped() uint64 { return c.dropped.Load() }

// Wait returns when the producer has published something TryGet has not
// read, when Interrupt or Close is called, or (spuriously) when a stale
// ring is drained: the caller tries TryGet again, and calls Wait again if
// it finds nothing. It first keeps looking for busy, yielding between
// looks, before it sleeps.
func (c *Consumer) Wait(busy time.Duration) error {
	if busy > 0 {
		start, spin := time.Now(), nonblock.StartSpin()
		for spun := time.Duration(0); spun < busy; spun = time.Since(start) {
			if c.q.head.Load() != c.tail || c.closed.Load() {
				return c.closedErr()
			}
			spin.Yield() // the producer is another process
		}
	}
	c.q.consumerSleeps.Store(1)
	if c.q.head.Load() != c.tail || c.closed.Load() {
		c.q.consumerSleeps.Store(0)
		return c.closedErr()
	}
	if err := c.data.Wait(); err != nil && !c.closed.Load() {
		return err
	}
	return c.closedErr()
}

func (c *Consumer) closedErr() error {
	if c.closed.Load() {
		return net.ErrClosed
	}
	return nil
}

// Interrupt makes a Wait in progress, or the next one, return. Any
// goroutine may call it.
func (c *Consumer) Interrupt() error { return c.data.Ring() }

// Close makes Wait return net.ErrClosed, now and from then on.
func (c *Consumer) Close() {
	c.closed.Store(true)
	c.data.Ring()
}
