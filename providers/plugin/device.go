//go:build linux

package plugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"vroce.dev/providers/plugin/ring"
	"vroce.dev/vroce"
)

// device is the host's side of a device a plugin serves: a vroce.Provider
// whose packets go out on ring 0 and come in on ring 1.
type device struct {
	p     *process
	id    uint64
	reg   *ring.Region
	bells [fdsPerDevice]*ring.Doorbell // by fd index; bells[fdRegion] is nil
	busy  time.Duration                // $VROCE_BUSY_POLL

	// Cached from the plugin's reply to Open.
	local netip.AddrPort
	mtu   int
	batch int

	// sendMu serialises Send (the producer has one writer); recvMu is held
	// by Recv. Close takes both before it unmaps the region.
	sendMu sync.Mutex
	tx     *ring.Producer
	recvMu sync.Mutex
	rx     *ring.Consumer

	closed      atomic.Bool
	interrupted atomic.Bool
	failure     atomic.Pointer[error] // why the plugin can serve it no more
}

var (
	_ vroce.RecvInterrupter = (*device)(nil)
	_ vroce.DropCounter     = (*device)(nil)
)

// newDevice makes a device's region and doorbells and returns the
// descriptors to pass to the plugin.
func newDevice(p *process, id uint64) (*device, [fdsPerDevice]int, error) {
	var fds [fdsPerDevice]int
	busy, err := vroce.BusyPollFromEnv()
	if err != nil {
		return nil, fds, err
	}
	reg, err := ring.Create(ringArea)
	if err != nil {
		return nil, fds, err
	}
	d := &device{p: p, id: id, reg: reg, busy: busy}
	fds[fdRegion] = reg.FD()
	for i := fdTxData; i < fdsPerDevice; i++ {
		if d.bells[i], err = ring.NewDoorbell(); err != nil {
			d.release()
			return nil, fds, err
		}
		fds[i] = d.bells[i].FD()
	}
	d.tx = reg.Producer(0, d.bells[fdTxData], d.bells[fdTxRoom], maxDatagram)
	d.rx = reg.Consumer(1, d.bells[fdRxData], d.bells[fdRxRoom], maxDatagram)
	return d, fds, nil
}

// setReply takes what the plugin said of the device it opened.
func (d *device) setReply(rep openReply) error {
	local, err := netip.ParseAddrPort(rep.LocalAddr)
	if err != nil {
		return fmt.Errorf("open: local address %q: %w", rep.LocalAddr, err)
	}
	if rep.MTU <= 0 || rep.BatchSize <= 0 {
		return fmt.Errorf("open: MTU %d, batch size %d", rep.MTU, rep.BatchSize)
	}
	d.local, d.mtu, d.batch = local, rep.MTU, rep.BatchSize
	return nil
}

// release frees the region and doorbells.
func (d *device) release() {
	for _, b := range d.bells {
		if b != nil {
			b.Close()
		}
	}
	d.reg.Close()
}

func (d *device) LocalAddr() netip.AddrPort { return d.local }
func (d *device) MTU() int                  { return d.mtu }
func (d *device) BatchSize() int            { return d.batch }

// Send writes pkts to the ring, waiting for room when it is full.
func (d *device) Send(pkts []vroce.Packet) error {
	d.sendMu.Lock()
	defer d.sendMu.Unlock()
	if d.closed.Load() {
		return net.ErrClosed // the region may be unmapped
	}
	for i := range pkts {
		pk := &pkts[i]
		m := ring.Meta{Addr: pk.Addr, Coalesce: pk.Coalesce}
		for {
			ok, err := d.tx.TryPut(m, pk.Data, pk.Body, pk.Tail)
			if err == nil && !ok {
				err = d.tx.WaitRoom()
				ok = false
			}
			if err != nil {
				return d.sendError(err)
			}
			if ok {
				break
			}
		}
	}
	if err := d.tx.Publish(); err != nil {
		return d.sendError(err)
	}
	return nil
}

func (d *device) sendError(err error) error {
	if f := d.failure.Load(); f != nil {
		return *f
	}
	if d.closed.Load() {
		return net.ErrClosed
	}
	if errors.Is(err, ring.ErrCorrupt) {
		err = fmt.Errorf("%w: %w", vroce.ErrProviderFailed, err)
		d.fail(err)
	}
	return err
}

// Recv copies what the plugin received into pkts.
func (d *device) Recv(pkts []vroce.Packet) (int, error) {
	d.recvMu.Lock()
	defer d.recvMu.Unlock()
	if d.closed.Load() {
		return 0, net.ErrClosed // the region may be unmapped
	}
	for {
		n := 0
		for n < len(pkts) {
			buf := pkts[n].Data[:cap(pkts[n].Data)]
			m, k, ok, err := d.rx.TryGet(buf)
			if err != nil {
				err = fmt.Errorf("%w: %w", vroce.ErrProviderFailed, err)
				d.fail(err)
				return 0, err
			}
			if !ok {
				break
			}
			pkts[n].Data, pkts[n].Addr = buf[:k], m.Addr
			n++
		}
		if err := d.rx.Release(); err != nil && n == 0 {
			return 0, d.recvError(err)
		}
		if n > 0 {
			return n, nil
		}
		if f := d.failure.Load(); f != nil {
			return 0, *f
		}
		if d.closed.Load() {
			return 0, net.ErrClosed
		}
		if d.interrupted.Swap(false) {
			return 0, nil
		}
		if err := d.rx.Wait(d.busy); err != nil {
			return 0, d.recvError(err)
		}
	}
}

func (d *device) recvError(err error) error {
	if f := d.failure.Load(); f != nil {
		return *f
	}
	if d.closed.Load() {
		return net.ErrClosed
	}
	return err
}

// InterruptRecv ends a blocked Recv, rung on the device's own doorbell.
func (d *device) InterruptRecv() {
	d.interrupted.Store(true)
	d.rx.Interrupt()
}

// Dropped counts datagrams dropped on either side of the ring.
func (d *device) Dropped() uint64 {
	n := d.rx.Dropped()
	if d.closed.Load() || d.failure.Load() != nil {
		return n
	}
	var rep statsReply
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if d.p.ctl.call(ctx, "Stats", deviceRequest{ID: d.id}, &rep) == nil {
		n += rep.Dropped
	}
	return n
}

// fail records that the plugin can serve the device no more and wakes
// its Recv and a Send waiting for room.
func (d *device) fail(why error) {
	if !d.failure.CompareAndSwap(nil, &why) {
		return
	}
	d.rx.Interrupt()
	d.tx.Close()
}

// Close closes the device here and in the plugin.
func (d *device) Close() error {
	if d.closed.Swap(true) {
		return nil
	}
	d.rx.Close()
	d.tx.Close()
	d.p.closeRemote(d.id)
	d.recvMu.Lock()
	d.sendMu.Lock()
	d.p.forget(d.id)
	d.release()
	d.sendMu.Unlock()
	d.recvMu.Unlock()
	return nil
}
