package afxdp

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"vroce.dev/internal/nonblock"
)

// An XDP socket and its UMEM: one per NIC queue. The UMEM is split in two
// fixed halves: frames the kernel fills with received packets (cycled
// through the fill and RX rings) and frames we fill with packets to send
// (cycled through the TX and completion rings). Frames never move between
// the halves, so neither side needs a lock against the other.

const (
	frameSize = 4096 // one page: the largest chunk aligned mode allows
	ringSize  = 1024 // entries in each of the four rings
	rxFrames  = ringSize
	txFrames  = ringSize
	// rxRoom is the largest frame the kernel will copy into a chunk: it
	// keeps XDP_PACKET_HEADROOM in front of every received packet.
	rxRoom = frameSize - unix.XDP_PACKET_HEADROOM
)

// ring is one of the four single-producer, single-consumer rings shared
// with the kernel. The index we own is kept locally and published with an
// atomic store; the kernel's index is read with an atomic load (the
// release/acquire pair the kernel's smp_load_acquire/smp_store_release
// expect), cached until it no longer tells us enough.
type ring struct {
	producer *atomic.Uint32
	consumer *atomic.Uint32
	flags    *atomic.Uint32
	mask     uint32
	local    uint32 // our index: producer for fill/TX, consumer for RX/completion
	cached   uint32 // the kernel's index, last read
	desc     unsafe.Pointer
	mem      []byte
}

func (r *ring) needWakeup() bool { return r.flags.Load()&unix.XDP_RING_NEED_WAKEUP != 0 }

// free is how many entries a producer may write now, reading the kernel's
// consumer index again when the cached one promises fewer than want.
func (r *ring) free(want uint32) uint32 {
	if n := ringSize - (r.local - r.cached); n >= want {
		return n
	}
	r.cached = r.consumer.Load()
	return ringSize - (r.local - r.cached)
}

// ready is how many entries a consumer may read now, reading the kernel's
// producer index again when the cached one promises fewer than want.
func (r *ring) ready(want uint32) uint32 {
	if n := r.cached - r.local; n >= want {
		return n
	}
	r.cached = r.producer.Load()
	return r.cached - r.local
}

// addr and xdpDesc view entry i of an address ring (fill, completion) and
// of a descriptor ring (RX, TX).
func (r *ring) addr(i uint32) *uint64 {
	return (*uint64)(unsafe.Add(r.desc, uintptr(i&r.mask)*8))
}

func (r *ring) xdpDesc(i uint32) *unix.XDPDesc {
	return (*unix.XDPDesc)(unsafe.Add(r.desc, uintptr(i&r.mask)*unsafe.Sizeof(unix.XDPDesc{})))
}

// publish makes our index visible to the kernel.
func (r *ring) publishProducer() { r.producer.Store(r.local) }
func (r *ring) publishConsumer() { r.consumer.Store(r.local) }

// xsk is one AF_XDP socket bound to one queue, with its own UMEM.
type xsk struct {
	fd    int
	queue int
	umem  []byte
	fill  ring
	comp  ring
	rx    ring
	tx    ring
	// txFree holds the TX frames not in flight (owned by the sender).
	txFree []uint64
	// lent holds receive frames whose payload the device is reading; back
	// collects invalid ones on their way to the fill ring (both owned by
	// the receiver).
	lent, back []uint64
	// zeroCopy says the driver maps the UMEM itself (no copy in the kernel).
	zeroCopy bool
}

// openXSK creates a socket on ifindex's queue, registers a UMEM, maps the
// rings, gives the kernel every receive frame and binds.
func openXSK(ifindex, queue int) (_ *xsk, err error) {
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return nil, privilegeError("create an AF_XDP socket", "CAP_NET_RAW", err)
	}
	s := &xsk{fd: fd, queue: queue}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	s.umem, err = unix.Mmap(-1, 0, (rxFrames+txFrames)*frameSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("afxdp: mapping the UMEM: %w", err)
	}
	reg := unix.XDPUmemReg{Addr: uint64(uintptr(unsafe.Pointer(&s.umem[0]))), Len: uint64(len(s.umem)), Size: frameSize}
	if err := setsockopt(fd, unix.XDP_UMEM_REG, unsafe.Pointer(&reg), unsafe.Sizeof(reg)); err != nil {
		// The kernel charges a UMEM to RLIMIT_MEMLOCK unless the process
		// has CAP_IPC_LOCK, and says so with ENOBUFS (ENOMEM on older ones).
		if errors.Is(err, unix.ENOMEM) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.ENOBUFS) {
			return nil, fmt.Errorf("afxdp: registering a %d MiB UMEM: %w (raise RLIMIT_MEMLOCK or grant CAP_IPC_LOCK)", len(s.umem)>>20, err)
		}
		return nil, fmt.Errorf("afxdp: registering the UMEM: %w", err)
	}
	for _, opt := range []int{unix.XDP_UMEM_FILL_RING, unix.XDP_UMEM_COMPLETION_RING, unix.XDP_RX_RING, unix.XDP_TX_RING} {
		if err := unix.SetsockoptInt(fd, unix.SOL_XDP, opt, ringSize); err != nil {
			return nil, fmt.Errorf("afxdp: sizing ring %d: %w", opt, err)
		}
	}
	var off unix.XDPMmapOffsets
	if err := getsockopt(fd, unix.XDP_MMAP_OFFSETS, unsafe.Pointer(&off), unsafe.Sizeof(off)); err != nil {
		return nil, fmt.Errorf("afxdp: reading ring offsets: %w", err)
	}
	maps := []struct {
		r     *ring
		off   unix.XDPRingOffset
		pgoff int64
		entry uintptr
		ours  bool // we produce into it
	}{
		{&s.fill, off.Fr, unix.XDP_UMEM_PGOFF_FILL_RING, 8, true},
		{&s.comp, off.Cr, unix.XDP_UMEM_PGOFF_COMPLETION_RING, 8, false},
		{&s.rx, off.Rx, unix.XDP_PGOFF_RX_RING, unsafe.Sizeof(unix.XDPDesc{}), false},
		{&s.tx, off.Tx, unix.XDP_PGOFF_TX_RING, unsafe.Sizeof(unix.XDPDesc{}), true},
	}
	for _, m := range maps {
		if err := m.r.mmap(fd, m.off, m.pgoff, m.entry, m.ours); err != nil {
			return nil, err
		}
	}
	for i := range uint32(rxFrames) {
		*s.fill.addr(s.fill.local + i) = uint64(i) * frameSize
	}
	s.fill.local += rxFrames
	s.fill.publishProducer()
	s.txFree = make([]uint64, 0, txFrames)
	s.lent, s.back = make([]uint64, 0, 64), make([]uint64, 0, 64)
	for i := range uint64(txFrames) {
		s.txFree = append(s.txFree, (rxFrames+i)*frameSize)
	}
	sa := &unix.SockaddrXDP{Flags: unix.XDP_USE_NEED_WAKEUP, Ifindex: uint32(ifindex), QueueID: uint32(queue)}
	// The kernel frees a closed socket's queue in the background, so a
	// device reopened at once can find it busy for a moment.
	for wait := time.Millisecond; ; wait *= 2 {
		err := unix.Bind(fd, sa)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EBUSY) || wait > time.Second {
			return nil, &bindError{queue: queue, err: err}
		}
		time.Sleep(wait)
	}
	var opts uint32
	if getsockopt(fd, unix.XDP_OPTIONS, unsafe.Pointer(&opts), 4) == nil {
		s.zeroCopy = opts&unix.XDP_OPTIONS_ZEROCOPY != 0
	}
	return s, nil
}

// bindError is a failed bind; on a queue past the first it means the
// interface has fewer active queues.
type bindError struct {
	queue int
	err   error
}

func (e *bindError) Error() string {
	if errors.Is(e.err, unix.EBUSY) {
		return fmt.Sprintf("afxdp: queue %d is in use by another AF_XDP socket", e.queue)
	}
	return fmt.Sprintf("afxdp: binding to queue %d: %v", e.queue, e.err)
}
func (e *bindError) Unwrap() error { return e.err }

func (r *ring) mmap(fd int, off unix.XDPRingOffset, pgoff int64, entry uintptr, producerSide bool) error {
	size := int(off.Desc) + ringSize*int(entry)
	mem, err := unix.Mmap(fd, pgoff, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return fmt.Errorf("afxdp: mapping a ring: %w", err)
	}
	base := unsafe.Pointer(&mem[0])
	r.mem = mem
	r.producer = (*atomic.Uint32)(unsafe.Add(base, off.Producer))
	r.consumer = (*atomic.Uint32)(unsafe.Add(base, off.Consumer))
	r.flags = (*atomic.Uint32)(unsafe.Add(base, off.Flags))
	r.desc = unsafe.Add(base, off.Desc)
	r.mask = ringSize - 1
	// The kernel starts both indexes at zero; reading them keeps us right
	// whatever it does.
	if producerSide {
		r.local, r.cached = r.producer.Load(), r.consumer.Load()
	} else {
		r.local, r.cached = r.consumer.Load(), r.producer.Load()
	}
	return nil
}

// close unmaps the rings and the UMEM and closes the socket.
func (s *xsk) close() {
	for _, r := range []*ring{&s.fill, &s.comp, &s.rx, &s.tx} {
		if r.mem != nil {
			unix.Munmap(r.mem)
			r.mem = nil
		}
	}
	if s.fd >= 0 {
		unix.Close(s.fd)
		s.fd = -1
	}
	if s.umem != nil {
		unix.Munmap(s.umem)
		s.umem = nil
	}
}

// giveBack returns the frames lent for the last batch to the fill ring.
func (s *xsk) giveBack() {
	if len(s.lent) > 0 {
		s.refill(s.lent)
		s.lent = s.lent[:0]
	}
}

// refill gives receive frames back to the kernel. The fill ring has room
// for them all: it is as large as the receive half of the UMEM.
func (s *xsk) refill(frames []uint64) {
	if len(frames) == 0 {
		return
	}
	s.fill.free(uint32(len(frames)))
	for i, f := range frames {
		*s.fill.addr(s.fill.local + uint32(i)) = f
	}
	s.fill.local += uint32(len(frames))
	s.fill.publishProducer()
	s.wakeRX()
}

// reclaim returns frames the kernel has sent to txFree.
func (s *xsk) reclaim() {
	n := s.comp.ready(ringSize)
	for i := range n {
		s.txFree = append(s.txFree, *s.comp.addr(s.comp.local + i))
	}
	if n > 0 {
		s.comp.local += n
		s.comp.publishConsumer()
	}
}

// kick asks the kernel to send what the TX ring holds. In copy mode each
// call sends a bounded batch and reports EAGAIN while more is left.
func (s *xsk) kick() error {
	_, _, errno := nonblock.Syscall6(unix.SYS_SENDTO, uintptr(s.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	switch errno {
	case 0, unix.EAGAIN, unix.EBUSY, unix.ENOBUFS, unix.ENETDOWN:
		// Busy and full are the NIC's queue; the transport recovers what a
		// down link drops.
		return nil
	}
	return errno
}

// wakeRX tells a driver that waits for it that the fill ring has frames.
func (s *xsk) wakeRX() {
	if s.fill.needWakeup() {
		nonblock.Syscall6(unix.SYS_RECVFROM, uintptr(s.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	}
}

func (s *xsk) stats() (unix.XDPStatistics, error) {
	var st unix.XDPStatistics
	err := getsockopt(s.fd, unix.XDP_STATISTICS, unsafe.Pointer(&st), unsafe.Sizeof(st))
	return st, err
}

func setsockopt(fd, opt int, p unsafe.Pointer, size uintptr) error {
	_, _, errno := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(opt), uintptr(p), size, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

func getsockopt(fd, opt int, p unsafe.Pointer, size uintptr) error {
	l := uint32(size)
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(opt), uintptr(p), uintptr(unsafe.Pointer(&l)), 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// privilegeError names the capability an EPERM means.
func privilegeError(what, capability string, err error) error {
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
		return fmt.Errorf("afxdp: %s: %w: needs %s (run as root or grant it with setcap)", what, err, capability)
	}
	return fmt.Errorf("afxdp: %s: %w", what, err)
}
