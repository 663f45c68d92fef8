//go:build linux

package ring

import (
	"encoding/binary"

	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ABIVersion numbers the layout of a Region: its header, the ring
// control lines and the slot format. Both processes must agree on it;
// the plugin handshake compares them before any region is mapped.
const ABIVersion = 1

// The layout of a Region: a header line, then two rings, each of four
// control lines and an area.
//
//	region header  0   magic, ABIVersion, area size
//	ring i         lineSize + i*ringBytes(area)
//	  line 0       head: bytes the producer has published (uint64, only grows)
//	  line 1       tail: bytes the consumer has released  (uint64, only grows)
//	  line 2       consumerSleeps (uint32): set by a consumer about to wait
//	  line 3       producerWaits  (uint32): set by a producer facing a full area
//	  area         slots
const (
	lineSize    = 128 // two x86 lines: the adjacent-line prefetcher pairs them
	ringControl = 4 * lineSize
	magic       = 0x76524e47 // "vRNG"
	// MinArea and MaxArea bound a ring's area; it is a power of two.
	MinArea = 64 << 10
	MaxArea = 64 << 20
)

func ringBytes(area int) int { return ringControl + area }

// RegionSize is the size of a Region whose rings have areas of area
// bytes.
func RegionSize(area int) int { return lineSize + 2*ringBytes(area) }

// seals are what a Region's memfd must carry before the other process
// maps it: a file that shrank under a mapping would fault on access.
const seals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL

// Region is the shared memory of one device: a mapping of a sealed memfd
// holding two rings. The process that created it owns the memfd; both
// unmap their own mapping with Close.
type Region struct {
	mem  []byte
	area int
	fd   int // the memfd; -1 once Close has run
}

// Create makes a Region with two rings of area bytes each (a power of
// two between MinArea and MaxArea), sealed against resizing.
func Create(area int) (*Region, error) {
	if err := checkArea(area); err != nil {
		return nil, err
	}
	fd, err := unix.MemfdCreate("vroce-ring", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("ring: memfd_create: %w", err)
	}
	if err := unix.Ftruncate(fd, int64(RegionSize(area))); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("ring: sizing the memfd: %w", err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("ring: sealing the memfd: %w", err)
	}
	r, err := mapRegion(fd, area)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	binary.LittleEndian.PutUint32(r.mem[0:], magic)
	binary.LittleEndian.PutUint32(r.mem[4:], ABIVersion)
	binary.LittleEndian.PutUint64(r.mem[8:], uint64(area))
	return r, nil
}

// Map maps a Region another process created, given its memfd (which Map
// takes over) and the area it announced. It checks the seals, the size
// and the header before it trusts any of it.
func Map(fd, area int) (*Region, error) {
	if err := checkArea(area); err != nil {
		unix.Close(fd)
		return nil, err
	}
	got, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil || got&(unix.F_SEAL_SHRINK|unix.F_SEAL_SEAL) != unix.F_SEAL_SHRINK|unix.F_SEAL_SEAL {
		unix.Close(fd)
		return nil, fmt.Errorf("%w: the memfd is not sealed against shrinking (seals %#x, %v)", ErrCorrupt, got, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Size != int64(RegionSize(area)) {
		unix.Close(fd)
		return nil, fmt.Errorf("%w: the memfd holds %d bytes, want %d (%v)", ErrCorrupt, st.Size, RegionSize(area), err)
	}
	r, err := mapRegion(fd, area)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	m, v, a := binary.LittleEndian.Uint32(r.mem[0:]), binary.LittleEndian.Uint32(r.mem[4:]), binary.LittleEndian.Uint64(r.mem[8:])
	if m != magic || v != ABIVersion || a != uint64(area) {
		r.Close()
		return nil, fmt.Errorf("%w: region header magic %#x ABI %d area %d, want %#x ABI %d area %d", ErrCorrupt, m, v, a, magic, ABIVersion, area)
	}
	return r, nil
}

func checkArea(area int) error {
	if area < MinArea || area > MaxArea || area&(area-1) != 0 {
		return fmt.Errorf("ring: area of %d bytes: want a power of two in [%d, %d]", area, MinArea, MaxArea)
	}
	return nil
}

func mapRegion(fd, area int) (*Region, error) {
	mem, err := unix.Mmap(fd, 0, RegionSize(area), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("ring: mmap: %w", err)
	}
	return &Region{mem: mem, area: area, fd: fd}, nil
}

// FD is the memfd, to pass to the other process. It stays open until
// Close.
func (r *Region) FD() int { return r.fd }

// Area is the size of each ring's area.
func (r *Region) Area() int { return r.area }

// Close unmaps the region and closes its memfd. Producers and consumers
// on it must be done.
func (r *Region) Close() error {
	if r.fd < 0 {
		return nil
	}
	err := unix.Munmap(r.mem)
	unix.Close(r.fd)
	r.fd, r.mem = -1, nil
	return err
}

// ring is a view of one ring's control lines and area.
type ring struct {
	head           *atomic.Uint64
	tail           *atomic.Uint64
	consumerSleeps *atomic.Uint32
	producerWaits  *atomic.Uint32
	area           []byte
}

// ring returns the i-th (0 or 1) ring of the region.
func (r *Region) ring(i int) ring {
	base := lineSize + i*ringBytes(r.area)
	at := func(line int) unsafe.Pointer { return unsafe.Pointer(&r.mem[base+line*lineSize]) }
	return ring{
		head:           (*atomic.Uint64)(at(0)),
		tail:           (*atomic.Uint64)(at(1)),
		consumerSleeps: (*atomic.Uint32)(at(2)),
		producerWaits:  (*atomic.Uint32)(at(3)),
		area:           r.mem[base+ringControl : base+ringControl+r.area],
	}
}

// published checks the indices the other process keeps and returns how
// many bytes lie between them: at most the area, head never behind tail,
// both on a slot boundary.
func (q ring) published(head, tail uint64) (uint64, error) {
	used := head - tail
	if used > uint64(len(q.area)) || head%slotAlign != 0 || tail%slotAlign != 0 {
		return 0, fmt.Errorf("%w: head %d tail %d in a %d-byte area", ErrCorrupt, head, tail, len(q.area))
	}
	return used, nil
}
