package vroce

import (
	"fmt"
	"net/netip"

	"sync/atomic"

	"vroce.dev/internal/secrand"
)

// PD is a protection domain (ibv_pd): QPs reach only the MRs of their PD.
type PD struct {
	dev  *Device
	refs atomic.Int32 // MRs, QPs, SRQs and AHs created in it
	gone atomic.Bool
}

// AllocPD allocates a protection domain.
func (d *Device) AllocPD() (*PD, error) {
	if err := d.reserve("alloc PD", "max_pd", &d.count.pd, d.attr.MaxPD); err != nil {
		return nil, err
	}
	return &PD{dev: d}, nil
}

// Dealloc frees the PD; it fails with ErrBusy while objects use it.
func (pd *PD) Dealloc() error {
	if n := pd.refs.Load(); n > 0 {
		return fmt.Errorf("vroce: dealloc PD: %d objects still use it: %w", n, ErrBusy)
	}
	if pd.gone.Swap(true) {
		return ErrClosed
	}
	pd.dev.release(&pd.dev.count.pd)
	return nil
}

func (pd *PD) use() error {
	if pd.gone.Load() {
		return fmt.Errorf("vroce: PD deallocated: %w", ErrClosed)
	}
	pd.refs.Add(1)
	return nil
}

// CreateAH creates an address handle for UD sends to dest, the peer
// device's IP address and RoCEv2 UDP port.
func (pd *PD) CreateAH(dest netip.AddrPort) (*AH, error) {
	flow, err := pd.dev.flowTo(dest)
	if err != nil {
		return nil, err
	}
	if err := pd.use(); err != nil {
		return nil, err
	}
	return &AH{pd: pd, flow: flow, Dest: flow.Dst}, nil
}

// Destroy releases the address handle.
func (ah *AH) Destroy() error {
	if ah.pd == nil {
		return ErrClosed
	}
	ah.pd.refs.Add(-1)
	ah.pd = nil
	return nil
}

// Access are memory region and QP access flags (ibv_access_flags).
type Access uint8

// Access flags.
const (
	AccessLocalWrite Access = 1 << iota
	AccessRemoteWrite
	AccessRemoteRead
	AccessRemoteAtomic

	accessAll = AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic
)

// MR is a memory region (ibv_mr): a Go byte slice registered for local and
// remote access. Its addresses are an I/O virtual address space starting at
// a random base (Addr), not the process's pointers, and its keys are
// random and independent: a peer can reach it only with the rkey it was
// told, and the lkey is good only for this process's own work requests.
type MR struct {
	pd     *PD
	buf    []byte
	addr   uint64
	lkey   uint32
	rkey   uint32
	access Access
	gone   atomic.Bool
}

// RegMR registers buf for the given access. Remote write and remote atomic
// access require local write, as in verbs.
func (pd *PD) RegMR(buf []byte, access Access) (*MR, error) {
	d := pd.dev
	if access&^accessAll != 0 {
		return nil, invalidf("reg MR: unknown access flags %#x", access)
	}
	if access&(AccessRemoteWrite|AccessRemoteAtomic) != 0 && access&AccessLocalWrite == 0 {
		return nil, invalidf("reg MR: remote write or atomic access requires local write")
	}
	if err := checkLimit("reg MR", "max_mr_size", len(buf), int(min(d.attr.MaxMRSize, 1<<62))); err != nil {
		return nil, err
	}
	if err := pd.use(); err != nil {
		return nil, err
	}
	if err := d.reserve("reg MR", "max_mr", &d.count.mr, d.attr.MaxMR); err != nil {
		pd.refs.Add(-1)
		return nil, err
	}
	mr := &MR{pd: pd, buf: buf, access: access}
	mr.addr = secrand.Uint64() & (1<<52 - 1) &^ 0xfff
	d.mrByLKey.insert(mr, func() bool {
		mr.lkey = secrand.Uint32()
		return mr.lkey != 0
	})
	d.mrByRKey.insert(mr, func() bool {
		mr.rkey = secrand.Uint32()
		return mr.rkey != 0 && mr.rkey != mr.lkey
	})
	return mr, nil
}

// Dereg deregisters the region: later accesses with its keys fail.
func (mr *MR) Dereg() error {
	if mr.gone.Swap(true) {
		return ErrClosed
	}
	d := mr.pd.dev
	d.mrByLKey.delete(mr)
	d.mrByRKey.delete(mr)
	d.release(&d.count.mr)
	mr.pd.refs.Add(-1)
	return nil
}

// LKey and RKey are the region's local and remote keys.
func (mr *MR) LKey() uint32 { return mr.lkey }
func (mr *MR) RKey() uint32 { return mr.rkey }

// Addr is the I/O virtual address of the region's first byte.
func (mr *MR) Addr() uint64 { return mr.addr }

// Len is the region's length in bytes.
func (mr *MR) Len() int { return len(mr.buf) }

// Bytes is the registered memory.
func (mr *MR) Bytes() []byte { return mr.buf }

// SGE describes n bytes at offset off of the region.
func (mr *MR) SGE(off, n int) SGE {
	return SGE{Addr: mr.addr + uint64(off), Length: uint32(n), LKey: mr.lkey}
}

// lookupLocal finds the MR whose lkey is key in pd and checks [va, va+n)
// against its bounds and access: every SGE of a work request passes here.
func (d *Device) lookupLocal(key uint32, pd *PD, need Access, va uint64, n uint64) (span, bool) {
	return d.mrByLKey.load(key).check(pd, need, va, n)
}

// lookupRemote is lookupLocal for a peer's access, by rkey: every RETH and
// AtomicETH passes here.
func (d *Device) lookupRemote(key uint32, pd *PD, need Access, va uint64, n uint64) (span, bool) {
	return d.mrByRKey.load(key).check(pd, need, va, n)
}

// check is the one bounds and access check of every local and remote
// access; a nil MR (no such key) fails it.
func (mr *MR) check(pd *PD, need Access, va uint64, n uint64) (span, bool) {
	if mr == nil || mr.pd != pd || mr.access&need != need || va < mr.addr {
		return span{}, false
	}
	off := va - mr.addr
	if off > uint64(len(mr.buf)) || n > uint64(len(mr.buf))-off {
		return span{}, false
	}
	return span{mr: mr, off: int(off), n: int(n)}, true
}
