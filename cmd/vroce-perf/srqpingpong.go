package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"time"

	"vroce.dev/vroce"
	"vroce.dev/vroce/cm"
)

// --oob pingpong --srq: rdma-core's ibv_srq_pingpong, so that vroce-perf
// stands in for either end of it against any RoCE peer:
//
//	vroce-perf send_lat --oob pingpong --srq --qps 16 -n 1000 HOST   # as: ibv_srq_pingpong -g 1 HOST
//
// Each end runs --qps RC QPs whose receives all come from one SRQ, and
// each QP plays ibv_rc_pingpong's game (the client's QPs send first; a
// QP sends again once its last send and a receive on it completed). -n
// counts sends, and receives, over all the QPs together, as the tool
// does. The exchange is ibv_rc_pingpong's address message, 256 of them
// each way (the tool's MAX_QP; those past --qps are zeros), the client's
// first, then "done\0".

// srqMaxQP is how many addresses each end of the exchange writes.
const srqMaxQP = 256

// srqPingpong is one end of an ibv_srq_pingpong run.
type srqPingpong struct {
	cfg   *config
	dev   *vroce.Device
	pd    *vroce.PD
	cq    *vroce.CQ
	srq   *vroce.SRQ
	mr    *vroce.MR
	qps   []*vroce.QP
	psns  []uint32
	peers []ppDest
	// rxDepth receives stay posted on the SRQ, each in its own slot of
	// mr after the send buffer.
	rxDepth int
}

func runSRQPingpong(cfg *config) error {
	c, err := oobControl(cfg, "pingpong")
	if err != nil {
		return err
	}
	defer c.Close()
	local := controlIP(c)
	p, err := newSRQPingpong(cfg, local)
	if err != nil {
		return err
	}
	defer p.dev.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if err := p.exchange(c, advertisedAddr(p.dev, local)); err != nil {
		return err
	}
	c.SetDeadline(time.Time{})
	start := time.Now()
	perQP, err := p.run()
	if err != nil {
		return err
	}
	// The client's QPs all send first, and each server QP answers on
	// itself: with a message per QP at least, every QP received some.
	for i, n := range perQP {
		if n == 0 && cfg.Iters >= len(p.qps) {
			return fmt.Errorf("srq pingpong: QP %d (QPN %#x) received nothing of %d messages", i, p.qps[i].QPN(), cfg.Iters)
		}
	}
	p.report(os.Stdout, time.Since(start), perQP)
	return nil
}

func newSRQPingpong(cfg *config, local netip.Addr) (*srqPingpong, error) {
	p := &srqPingpong{cfg: cfg, rxDepth: 500}
	dev, err := openOOBDevice(cfg, local)
	if err != nil {
		return nil, err
	}
	p.dev = dev
	fail := func(err error) (*srqPingpong, error) { dev.Close(); return nil, err }
	if p.pd, err = dev.AllocPD(); err != nil {
		return fail(err)
	}
	if p.cq, err = dev.CreateCQ(p.rxDepth + 2*cfg.QPs); err != nil {
		return fail(err)
	}
	if p.srq, err = p.pd.CreateSRQ(vroce.SRQAttr{MaxWR: p.rxDepth, MaxSGE: 1}); err != nil {
		return fail(err)
	}
	buf := make([]byte, (p.rxDepth+1)*cfg.Size)
	for i := range buf[:cfg.Size] {
		buf[i] = byte(i)
	}
	if p.mr, err = p.pd.RegMR(buf, vroce.AccessLocalWrite); err != nil {
		return fail(err)
	}
	for range cfg.QPs {
		qp, err := p.pd.CreateQP(vroce.QPInitAttr{Type: vroce.RC, SendCQ: p.cq, RecvCQ: p.cq, SRQ: p.srq,
			Cap: vroce.QPCap{MaxSendWR: 1, MaxSendSGE: 1}})
		if err != nil {
			return fail(err)
		}
		p.qps = append(p.qps, qp)
		p.psns = append(p.psns, randomPSN())
	}
	for k := range p.rxDepth {
		if err := p.postRecv(k); err != nil {
			return fail(err)
		}
	}
	return p, nil
}

// exchange trades the 256 addresses each way, and connects the QPs
// before the server answers, as the tool does.
func (p *srqPingpong) exchange(c net.Conn, local netip.Addr) error {
	ours := make([]byte, 0, srqMaxQP*ppDestLen)
	for i := range srqMaxQP {
		var d ppDest
		if i < len(p.qps) {
			d = ppDest{qpn: p.qps[i].QPN(), psn: p.psns[i], gid: gidOf(local)}
		}
		ours = append(ours, d.marshal()...)
	}
	theirs := func() error {
		b := make([]byte, srqMaxQP*ppDestLen)
		if _, err := io.ReadFull(c, b); err != nil {
			return fmt.Errorf("srq pingpong: reading the peer's addresses: %w", err)
		}
		for i := range p.qps {
			d, err := parsePPDest(b[i*ppDestLen : (i+1)*ppDestLen])
			if err != nil {
				return fmt.Errorf("srq pingpong: address %d: %w", i, err)
			}
			p.peers = append(p.peers, d)
		}
		return p.connect()
	}
	if p.cfg.Server != "" {
		if _, err := c.Write(ours); err != nil {
			return err
		}
		if err := theirs(); err != nil {
			return err
		}
		_, err := c.Write([]byte(ppDone))
		return err
	}
	if err := theirs(); err != nil {
		return err
	}
	if _, err := c.Write(ours); err != nil {
		return err
	}
	done := make([]byte, len(ppDone))
	if _, err := io.ReadFull(c, done); err != nil || string(done) != ppDone {
		return fmt.Errorf("srq pingpong: the client did not finish the exchange: %q %v", done, err)
	}
	return nil
}

// connect moves each QP to RTS aimed at its peer QP, with the tool's
// attributes (as ibv_rc_pingpong's: pingpong.connectQP).
func (p *srqPingpong) connect() error {
	mtu := vroce.MTU(p.cfg.MTU)
	if mtu == 0 {
		mtu = vroce.MTU1024
	}
	for i, qp := range p.qps {
		peer := p.peers[i]
		dest := netip.AddrPortFrom(peer.addr(), 4791)
		err := cm.Connect(qp, p.psns[i], cm.Peer{QPN: peer.qpn, PSN: peer.psn, Addr: dest, MTU: mtu, MaxRdAtomic: 1},
			cm.Params{MinRNRTimer: 12, MaxRdAtomic: 1})
		if err != nil {
			return fmt.Errorf("srq pingpong: connect QP %d to %v QPN %#x: %w", i, dest, peer.qpn, err)
		}
	}
	return nil
}

// srqSendID marks send work requests; a receive's ID is its slot.
const srqSendID = 1 << 62

func (p *srqPingpong) postRecv(k int) error {
	size := p.cfg.Size
	return p.srq.PostRecv(vroce.RecvWR{ID: uint64(k), SGL: []vroce.SGE{p.mr.SGE((1+k)*size, size)}})
}

func (p *srqPingpong) postSend(i int) error {
	return p.qps[i].PostSend(vroce.SendWR{ID: srqSendID, Opcode: vroce.WRSend, Flags: vroce.SendSignaled,
		SGL: []vroce.SGE{p.mr.SGE(0, p.cfg.Size)}})
}

// run plays the tool's game and returns how many messages each QP
// received. Every receive must name one of our QPs and bring size bytes.
func (p *srqPingpong) run() ([]int, error) {
	const recvPending, sendPending = 1, 2
	iters := p.cfg.Iters
	pending := make([]int, len(p.qps))
	perQP := make([]int, len(p.qps))
	index := make(map[uint32]int, len(p.qps))
	for i, qp := range p.qps {
		index[qp.QPN()] = i
		pending[i] = recvPending
		if p.cfg.Server != "" {
			if err := p.postSend(i); err != nil {
				return nil, err
			}
			pending[i] |= sendPending
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(iters)*time.Second+30*time.Second)
	defer cancel()
	wcs := make([]vroce.WorkCompletion, 64)
	sent, rcvd := 0, 0
	for rcvd < iters || sent < iters {
		n, err := p.cq.PollWait(ctx, wcs)
		if err != nil {
			return nil, fmt.Errorf("srq pingpong: after %d sends and %d receives: %w", sent, rcvd, err)
		}
		for _, wc := range wcs[:n] {
			if wc.Status != vroce.WCSuccess {
				return nil, fmt.Errorf("srq pingpong: %v work completion %#x on QPN %#x failed: %v", wc.Opcode, wc.ID, wc.QPN, wc.Status)
			}
			i, ok := index[wc.QPN]
			if !ok {
				return nil, fmt.Errorf("srq pingpong: a completion names QPN %#x, none of ours", wc.QPN)
			}
			if wc.ID == srqSendID {
				sent++
				pending[i] &^= sendPending
			} else {
				if int(wc.ByteLen) != p.cfg.Size {
					return nil, fmt.Errorf("srq pingpong: receive %d on QP %d brought %d bytes, want %d", rcvd, i, wc.ByteLen, p.cfg.Size)
				}
				rcvd++
				perQP[i]++
				pending[i] &^= recvPending
				if err := p.postRecv(int(wc.ID)); err != nil {
					return nil, err
				}
			}
			if sent < iters && pending[i] == 0 {
				if err := p.postSend(i); err != nil {
					return nil, err
				}
				pending[i] = recvPending | sendPending
			}
		}
	}
	return perQP, nil
}

// report prints the tool's two summary lines, how the receives spread
// over the QPs, and the transport's work.
func (p *srqPingpong) report(w io.Writer, took time.Duration, perQP []int) {
	bytes := int64(p.cfg.Size) * int64(p.cfg.Iters) * 2
	secs := took.Seconds()
	fmt.Fprintf(w, "%d bytes in %.2f seconds = %.2f Mbit/sec\n", bytes, secs, float64(bytes)*8/secs/1e6)
	fmt.Fprintf(w, "%d iters in %.2f seconds = %.2f usec/iter\n", p.cfg.Iters, secs, secs*1e6/float64(p.cfg.Iters))
	least, most := perQP[0], perQP[0]
	var retrans, timeouts uint64
	for i, n := range perQP {
		least, most = min(least, n), max(most, n)
		s := p.qps[i].Stats()
		retrans, timeouts = retrans+s.Retransmits, timeouts+s.Timeouts
	}
	fmt.Fprintf(w, "%d QPs received from one SRQ: %d to %d messages each; %d retransmitted, %d timeouts\n",
		len(p.qps), least, most, retrans, timeouts)
	printRefusals(w, refusals(p.dev.Stats()))
}
