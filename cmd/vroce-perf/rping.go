package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync"
	"time"

	"vroce.dev/vroce"
	"vroce.dev/vroce/cm"
)

// rping: either end of librdmacm's rping (examples/rping.c) over RDMA_CM,
// with vroce/cm speaking to Linux's connection manager:
//
//	vroce-perf rping -n 5 -s 64 HOST       # as: rping -c -a HOST -C 5 -S 64 -V
//	vroce-perf rping -n 5 -s 64            # as: rping -s -C 5 -S 64
//
// Per ping the client fills its start buffer with rping's text pattern and
// SENDs its address, key and length (16 bytes, big-endian); the server
// READs it and SENDs a go-ahead; the client SENDs where its echo buffer
// is; the server WRITEs back what it read and SENDs a go-ahead; the client
// checks the echo against what it sent. The service is rdma_cm port 7174
// (--port).

const (
	rpingPort    = 7174
	rpingInfoLen = 16 // struct rping_rdma_info: buf, rkey, size
)

// rpingPattern is what an rping client puts in its start buffer for ping
// k: "rdma-ping-k: " then the letters from start on, cycling 'A' to 'z'
// (ASCII 65 to 122), and a NUL at the end.
func rpingPattern(b []byte, k int) {
	n := copy(b, fmt.Sprintf("rdma-ping-%d: ", k))
	c := byte(65 + k%58)
	for i := n; i < len(b); i++ {
		b[i] = c
		if c++; c > 122 {
			c = 65
		}
	}
	b[len(b)-1] = 0
}

// rpingInfo is where one end's buffer is.
type rpingInfo struct {
	addr uint64
	rkey uint32
	size uint32
}

func (r rpingInfo) put(b []byte) {
	binary.BigEndian.PutUint64(b, r.addr)
	binary.BigEndian.PutUint32(b[8:], r.rkey)
	binary.BigEndian.PutUint32(b[12:], r.size)
}

func getRpingInfo(b []byte) rpingInfo {
	return rpingInfo{binary.BigEndian.Uint64(b), binary.BigEndian.Uint32(b[8:]), binary.BigEndian.Uint32(b[12:])}
}

// rpingEnd is one end's verbs: a QP, its CQ and a buffer holding the
// send and receive slots, then the start and echo (rdma) buffers.
type rpingEnd struct {
	dev  *vroce.Device
	cm   *cm.Manager
	pd   *vroce.PD
	cq   *vroce.CQ
	mr   *vroce.MR
	qp   *vroce.QP
	size int
	gone chan struct{} // the peer disconnected
}

const (
	rpSend  = 0
	rpRecv  = rpingInfoLen
	rpStart = 2 * rpingInfoLen
)

func (e *rpingEnd) buf() []byte   { return e.mr.Bytes() }
func (e *rpingEnd) start() []byte { return e.buf()[rpStart : rpStart+e.size] }
func (e *rpingEnd) echo() []byte  { return e.buf()[rpStart+e.size : rpStart+2*e.size] }

func newRpingEnd(cfg *config) (*rpingEnd, error) {
	dev, err := openOOBDevice(cfg, netip.Addr{})
	if err != nil {
		return nil, err
	}
	e := &rpingEnd{dev: dev, size: cfg.Size, gone: make(chan struct{})}
	fail := func(err error) (*rpingEnd, error) { e.close(); return nil, err }
	var once sync.Once
	if e.cm, err = cm.New(dev, cm.Config{OnEvent: func(ev cm.Event) {
		if ev.Type == cm.EventDisconnected {
			once.Do(func() { close(e.gone) })
		}
	}}); err != nil {
		return fail(err)
	}
	if e.pd, err = dev.AllocPD(); err != nil {
		return fail(err)
	}
	if e.cq, err = dev.CreateCQ(64); err != nil {
		return fail(err)
	}
	if e.mr, err = e.pd.RegMR(make([]byte, rpStart+2*cfg.Size), vroce.AccessLocalWrite|vroce.AccessRemoteRead|vroce.AccessRemoteWrite); err != nil {
		return fail(err)
	}
	if e.qp, err = e.pd.CreateQP(vroce.QPInitAttr{Type: vroce.RC, SendCQ: e.cq, RecvCQ: e.cq,
		Cap: vroce.QPCap{MaxSendWR: 16, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return fail(err)
	}
	return e, nil
}

func (e *rpingEnd) close() {
	if e.cm != nil {
		e.cm.Close()
	}
	e.dev.Close()
}

// params are rping's: one READ in flight each way.
func rpingParams(cfg *config) cm.Params {
	return cm.Params{Access: vroce.AccessRemoteRead | vroce.AccessRemoteWrite, MaxRdAtomic: 1, Service: uint16(cfg.Port), MTU: vroce.MTU(cfg.MTU)}
}

func (e *rpingEnd) postRecv() error {
	return e.qp.PostRecv(vroce.RecvWR{ID: 1, SGL: []vroce.SGE{e.mr.SGE(rpRecv, rpingInfoLen)}})
}

// send SENDs an info message.
func (e *rpingEnd) send(info rpingInfo) error {
	info.put(e.buf()[rpSend:])
	return e.qp.PostSend(vroce.SendWR{ID: 2, Opcode: vroce.WRSend, Flags: vroce.SendSignaled, SGL: []vroce.SGE{e.mr.SGE(rpSend, rpingInfoLen)}})
}

// wait waits for a completion of the given opcode, failing on any error.
// It drops completions of other operations: rping's exchange strictly
// alternates, so those are only of its own SENDs, which it does not wait
// for (perftest -R's ends send at once, and pfControl.wait keeps them).
func (e *rpingEnd) wait(ctx context.Context, op vroce.WCOpcode) (vroce.WorkCompletion, error) {
	wc := make([]vroce.WorkCompletion, 1)
	for {
		if _, err := e.cq.PollWait(ctx, wc); err != nil {
			return wc[0], fmt.Errorf("rping: waiting for %v: %w (QP %v, %+v)", op, err, e.qp.State(), e.qp.Stats())
		}
		if wc[0].Status != vroce.WCSuccess {
			return wc[0], fmt.Errorf("rping: %v failed: %v", wc[0].Opcode, wc[0].Status)
		}
		if wc[0].Opcode == op {
			return wc[0], nil
		}
	}
}

// recvInfo waits for the peer's next SEND and posts the next receive.
func (e *rpingEnd) recvInfo(ctx context.Context) (rpingInfo, error) {
	if _, err := e.wait(ctx, vroce.WCRecv); err != nil {
		return rpingInfo{}, err
	}
	info := getRpingInfo(e.buf()[rpRecv:])
	return info, e.postRecv()
}

func (e *rpingEnd) info(off, n int) rpingInfo {
	return rpingInfo{addr: e.mr.Addr() + uint64(off), rkey: e.mr.RKey(), size: uint32(n)}
}

func runRping(cfg *config) error {
	e, err := newRpingEnd(cfg)
	if err != nil {
		return err
	}
	defer e.close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(cfg.Iters)*time.Second+60*time.Second)
	defer cancel()
	var id *cm.ID
	if cfg.Server == "" {
		l, err := e.cm.Listen(uint16(cfg.Port), 0)
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "vroce-perf: rping server waiting on %v, rdma_cm port %d\n", e.dev.LocalAddr(), cfg.Port)
		req, err := l.Accept(ctx)
		if err != nil {
			return err
		}
		if id, err = req.Accept(e.qp, rpingParams(cfg)); err != nil {
			return err
		}
		// Posted as soon as the QP can take it; a SEND that comes
		// sooner meets an RNR NAK and is retried.
		if err := e.postRecv(); err != nil {
			return err
		}
		if err := id.WaitEstablished(ctx); err != nil {
			return err
		}
		err = e.serve(ctx, cfg.Iters)
		l.Close()
		if err != nil {
			return err
		}
	} else {
		to, err := netip.ParseAddr(cfg.Server)
		if err != nil {
			return fmt.Errorf("rping: server %q: %w", cfg.Server, err)
		}
		if id, err = e.cm.Connect(ctx, e.qp, netip.AddrPortFrom(to, 4791), rpingParams(cfg)); err != nil {
			return err
		}
		if err := e.postRecv(); err != nil { // the server speaks only when spoken to
			return err
		}
		if err := e.ping(ctx, cfg.Iters); err != nil {
			return err
		}
	}
	// The client disconnects when it is done, as rping's does; a server
	// waits for that a while.
	wait := time.Duration(0)
	if cfg.Server == "" {
		wait = 5 * time.Second
	}
	select {
	case <-e.gone:
	case <-time.After(wait):
		id.Disconnect()
	}
	fmt.Printf("rping: %d pings of %d bytes with %v, every echo checked\n", cfg.Iters, cfg.Size, id.Peer())
	dctx, dcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer dcancel()
	return e.cm.Drain(dctx)
}

// ping is the client's loop.
func (e *rpingEnd) ping(ctx context.Context, count int) error {
	for k := range count {
		rpingPattern(e.start(), k)
		clear(e.echo())
		if err := e.send(e.info(rpStart, e.size)); err != nil {
			return err
		}
		if _, err := e.recvInfo(ctx); err != nil { // the server read it
			return err
		}
		if err := e.send(e.info(rpStart+e.size, e.size)); err != nil {
			return err
		}
		if _, err := e.recvInfo(ctx); err != nil { // the server wrote the echo
			return err
		}
		if !bytes.Equal(e.start(), e.echo()) {
			return fmt.Errorf("rping: ping %d: the echo %q differs from %q", k, e.echo(), e.start())
		}
	}
	return nil
}

// serve is the server's loop: it reads each ping, checks it is rping's
// pattern, and writes it back.
func (e *rpingEnd) serve(ctx context.Context, count int) error {
	want := make([]byte, e.size)
	for k := range count {
		info, err := e.recvInfo(ctx)
		if err != nil {
			return err
		}
		if int(info.size) != e.size {
			return fmt.Errorf("rping: the client's buffer is %d bytes, want %d (-s)", info.size, e.size)
		}
		clear(e.echo())
		if err := e.qp.PostSend(vroce.SendWR{ID: 3, Opcode: vroce.WRRDMARead, Flags: vroce.SendSignaled,
			SGL: []vroce.SGE{e.mr.SGE(rpStart+e.size, e.size)}, RemoteAddr: info.addr, RKey: info.rkey}); err != nil {
			return err
		}
		if _, err := e.wait(ctx, vroce.WCRDMARead); err != nil {
			return err
		}
		if rpingPattern(want, k); !bytes.Equal(e.echo(), want) {
			return fmt.Errorf("rping: ping %d read %q, want %q", k, e.echo(), want)
		}
		if err := e.send(rpingInfo{}); err != nil {
			return err
		}
		if info, err = e.recvInfo(ctx); err != nil {
			return err
		}
		n := bytes.IndexByte(e.echo(), 0) + 1 // strlen + 1, as rping writes
		if n <= 0 || n > int(info.size) {
			return errors.New("rping: no room for the echo in the client's buffer")
		}
		if err := e.qp.PostSend(vroce.SendWR{ID: 4, Opcode: vroce.WRRDMAWrite, Flags: vroce.SendSignaled,
			SGL: []vroce.SGE{e.mr.SGE(rpStart+e.size, n)}, RemoteAddr: info.addr, RKey: info.rkey}); err != nil {
			return err
		}
		if _, err := e.wait(ctx, vroce.WCRDMAWrite); err != nil {
			return err
		}
		if err := e.send(rpingInfo{}); err != nil {
			return err
		}
	}
	// The last go-ahead must leave before we disconnect, which flushes
	// what is still queued. The client disconnects once it has it, and
	// its DREQ may overtake the ACK: a flush after the peer has gone is
	// that.
	wc, err := e.wait(ctx, vroce.WCSend)
	if err != nil && wc.Status == vroce.WCWRFlushErr {
		select {
		case <-e.gone:
			return nil
		case <-time.After(time.Second):
		}
	}
	return err
}
