package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"time"

	"vroce.dev/vroce"
	"vroce.dev/vroce/cm"
)

// udaddy: either end of librdmacm's udaddy (examples/udaddy.c), UD
// datagrams between QPs that RDMA_CM's UDP port space names:
//
//	vroce-perf udaddy -n 10 -s 100 HOST    # as: udaddy -s HOST -C 10 -S 100
//	vroce-perf udaddy -n 10 -s 100         # as: udaddy -C 10 -S 100
//
// The client resolves the service (rdma_cm port 7174, --port) to the
// server's QP with a SIDR_REQ, then sends -n SEND_WITH_IMMs of -s bytes,
// each carrying its QPN as the immediate; the server answers once they
// are all in with as many, carrying its own. Every QP uses rdma_cm's UDP
// Q_Key; replies go to the sender's address at RoCEv2's port, as an
// address handle made from a completion does.

// udaddyEnd is one end: a UD QP, its CQ, and a buffer with the send
// slot first and then a receive slot (GRH included) per datagram.
type udaddyEnd struct {
	cfg  *config
	dev  *vroce.Device
	cm   *cm.Manager
	pd   *vroce.PD
	cq   *vroce.CQ
	mr   *vroce.MR
	qp   *vroce.QP
	slot int
}

func newUdaddyEnd(cfg *config) (*udaddyEnd, error) {
	dev, err := openOOBDevice(cfg, netip.Addr{})
	if err != nil {
		return nil, err
	}
	e := &udaddyEnd{cfg: cfg, dev: dev, slot: cfg.Size + ppGRH}
	fail := func(err error) (*udaddyEnd, error) { e.close(); return nil, err }
	if e.cm, err = cm.New(dev, cm.Config{}); err != nil {
		return fail(err)
	}
	if e.pd, err = dev.AllocPD(); err != nil {
		return fail(err)
	}
	if e.cq, err = dev.CreateCQ(2*cfg.Iters + 2); err != nil {
		return fail(err)
	}
	if e.mr, err = e.pd.RegMR(make([]byte, (cfg.Iters+1)*e.slot), vroce.AccessLocalWrite); err != nil {
		return fail(err)
	}
	if e.qp, err = e.pd.CreateQP(vroce.QPInitAttr{Type: vroce.UD, SendCQ: e.cq, RecvCQ: e.cq,
		Cap: vroce.QPCap{MaxSendWR: cfg.Iters, MaxRecvWR: cfg.Iters, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return fail(err)
	}
	if err := readyUD(e.qp, cm.UDPQKey, randomPSN()); err != nil {
		return fail(err)
	}
	// Every receive is posted before the peer can learn the QP.
	for i := range cfg.Iters {
		if err := e.qp.PostRecv(vroce.RecvWR{ID: uint64(i), SGL: []vroce.SGE{e.mr.SGE((1+i)*e.slot, e.slot)}}); err != nil {
			return fail(err)
		}
	}
	for i := range cfg.Size {
		e.mr.Bytes()[ppGRH+i] = byte(i)
	}
	return e, nil
}

func (e *udaddyEnd) close() {
	if e.cm != nil {
		e.cm.Close()
	}
	e.dev.Close()
}

// sendAll posts -n datagrams to peer, each with our QPN as immediate.
func (e *udaddyEnd) sendAll(peer cm.UDPeer) error {
	ah, err := e.pd.CreateAH(peer.Addr)
	if err != nil {
		return err
	}
	for i := range e.cfg.Iters {
		if err := e.qp.PostSend(vroce.SendWR{ID: uint64(i), Opcode: vroce.WRSendWithImm, Flags: vroce.SendSignaled, Imm: e.qp.QPN(),
			SGL: []vroce.SGE{e.mr.SGE(ppGRH, e.cfg.Size)}, AH: ah, RemoteQPN: peer.QPN, RemoteQKey: peer.QKey}); err != nil {
			return err
		}
	}
	return nil
}

// collect waits until sends datagrams have left and recvs have arrived,
// and returns the first that arrived. Each must bring -s bytes (and the
// GRH) from the QP its immediate names: srcQP when that is not zero,
// else the one the first came from.
func (e *udaddyEnd) collect(ctx context.Context, sends, recvs int, srcQP uint32) (vroce.WorkCompletion, error) {
	var first vroce.WorkCompletion
	wcs := make([]vroce.WorkCompletion, 16)
	sent, got := 0, 0
	for sent < sends || got < recvs {
		k, err := e.cq.PollWait(ctx, wcs)
		if err != nil {
			return first, fmt.Errorf("udaddy: %d of %d datagrams sent, %d of %d received: %w", sent, sends, got, recvs, err)
		}
		for _, wc := range wcs[:k] {
			switch {
			case wc.Status != vroce.WCSuccess:
				return first, fmt.Errorf("udaddy: %v %d failed: %v", wc.Opcode, wc.ID, wc.Status)
			case wc.Opcode == vroce.WCSend:
				sent++
				continue
			case int(wc.ByteLen) != e.slot:
				return first, fmt.Errorf("udaddy: datagram %d brought %d bytes, want %d and the GRH", got, wc.ByteLen, e.cfg.Size)
			case wc.Flags&vroce.WCWithImm == 0 || wc.Imm != wc.SrcQP:
				return first, fmt.Errorf("udaddy: datagram %d from QPN %#x carries immediate %#x, not its QPN", got, wc.SrcQP, wc.Imm)
			case srcQP != 0 && wc.SrcQP != srcQP:
				return first, fmt.Errorf("udaddy: datagram %d from QPN %#x, not %#x", got, wc.SrcQP, srcQP)
			}
			if got == 0 {
				first, srcQP = wc, wc.SrcQP
			}
			got++
		}
	}
	return first, nil
}

func runUdaddy(cfg *config) error {
	e, err := newUdaddyEnd(cfg)
	if err != nil {
		return err
	}
	defer e.close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(cfg.Iters)*time.Second+60*time.Second)
	defer cancel()
	var peer cm.UDPeer
	if cfg.Server == "" {
		l, err := e.cm.ListenUD(uint16(cfg.Port), e.qp)
		if err != nil {
			return err
		}
		defer l.Close()
		fmt.Fprintf(os.Stderr, "vroce-perf: udaddy server waiting on %v, rdma_cm UDP port %d, QPN %#x\n", e.dev.LocalAddr(), cfg.Port, e.qp.QPN())
		first, err := e.collect(ctx, 0, cfg.Iters, 0)
		if err != nil {
			return err
		}
		peer = cm.UDPeer{Addr: netip.AddrPortFrom(first.Src.Addr(), 4791), QPN: first.SrcQP, QKey: cm.UDPQKey}
		if err := e.sendAll(peer); err != nil {
			return err
		}
		if _, err := e.collect(ctx, cfg.Iters, 0, 0); err != nil {
			return err
		}
	} else {
		to, err := netip.ParseAddr(cfg.Server)
		if err != nil {
			return fmt.Errorf("udaddy: server %q: %w", cfg.Server, err)
		}
		if peer, err = e.cm.ResolveUD(ctx, netip.AddrPortFrom(to, 4791), uint16(cfg.Port)); err != nil {
			return err
		}
		if err := e.sendAll(peer); err != nil {
			return err
		}
		if _, err := e.collect(ctx, cfg.Iters, cfg.Iters, peer.QPN); err != nil {
			return err
		}
	}
	fmt.Printf("udaddy: %d datagrams of %d bytes each way with %v QPN %#x, every one from that QP\n", cfg.Iters, cfg.Size, peer.Addr.Addr(), peer.QPN)
	return nil
}
