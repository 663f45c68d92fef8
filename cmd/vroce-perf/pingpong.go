package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"time"

	"vroce.dev/vroce"
	"vroce.dev/vroce/cm"
)

// --oob pingpong: the out-of-band exchange and the ping-pong of rdma-core's
// ibv_rc_pingpong and ibv_ud_pingpong (libibverbs/examples), so that
// vroce-perf stands in for either end against any RoCE peer:
//
//	vroce-perf send_lat --oob pingpong -s 4096 -n 10 HOST      # as: ibv_rc_pingpong -g 1 -n 10 HOST
//	vroce-perf send_lat --oob pingpong --conn UD -s 512 HOST    # as: ibv_ud_pingpong -g 1 -s 512 HOST
//
// The client connects to TCP port 18515 and writes its address as
// "LID:QPN:PSN:GID\0" (%04x:%06x:%06x: and the GID's 16 bytes in hex, 52
// bytes), the server answers in kind, and the client writes "done\0".
// Each end then sends from its own PSN and receives from the peer's; the
// client sends first, and each end sends again once its last send and a
// receive have completed.

// ppDestLen is the length of a pingpong address message, NUL included.
const ppDestLen = 4 + 1 + 6 + 1 + 6 + 1 + 32 + 1

// ppDone is the client's last word of the exchange.
const ppDone = "done\x00"

// ppQKey is the Q_Key ibv_ud_pingpong's QPs use.
const ppQKey = 0x11111111

// ppDest is one end's address, as the pingpong tools exchange it.
type ppDest struct {
	lid uint16
	qpn uint32
	psn uint32
	gid [16]byte
}

// errPPDest: the peer's address message is not one the tools write.
var errPPDest = errors.New("pingpong: malformed address message")

func (d *ppDest) marshal() []byte {
	b := fmt.Appendf(nil, "%04x:%06x:%06x:%x", d.lid, d.qpn, d.psn, d.gid[:])
	return append(b, 0)
}

// parsePPDest reads an address message from the network; it accepts only
// what the tools write.
func parsePPDest(b []byte) (ppDest, error) {
	var d ppDest
	if len(b) != ppDestLen || b[4] != ':' || b[11] != ':' || b[18] != ':' || b[ppDestLen-1] != 0 {
		return d, fmt.Errorf("%w: %q", errPPDest, b)
	}
	field := func(s []byte, bits int) (uint64, error) {
		v, err := strconv.ParseUint(string(s), 16, bits)
		if err != nil {
			return 0, fmt.Errorf("%w: %q: %v", errPPDest, b, err)
		}
		return v, nil
	}
	lid, err := field(b[0:4], 16)
	if err != nil {
		return d, err
	}
	qpn, err := field(b[5:11], 24)
	if err != nil {
		return d, err
	}
	psn, err := field(b[12:18], 24)
	if err != nil {
		return d, err
	}
	for i := range d.gid {
		v, err := field(b[19+2*i:21+2*i], 8)
		if err != nil {
			return d, err
		}
		d.gid[i] = byte(v)
	}
	d.lid, d.qpn, d.psn = uint16(lid), uint32(qpn), uint32(psn)
	return d, nil
}

// addr is the RoCEv2 address the GID names.
func (d *ppDest) addr() netip.Addr { return netip.AddrFrom16(d.gid).Unmap() }

// gidOf is the RoCEv2 GID of an address: IPv4 mapped into IPv6.
func gidOf(a netip.Addr) [16]byte { return a.As16() }

// randomPSN is a QP's initial PSN, unguessable as vRoCE's own are (the
// tools use lrand48; a peer cannot tell).
func randomPSN() uint32 {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("vroce-perf: no system randomness: " + err.Error())
	}
	return binary.LittleEndian.Uint32(b[:]) & 0xffffff
}

// pingpong is one end of a ping-pong run.
type pingpong struct {
	cfg  *config
	ud   bool
	dev  *vroce.Device
	pd   *vroce.PD
	cq   *vroce.CQ
	mr   *vroce.MR
	qp   *vroce.QP
	ah   *vroce.AH
	peer ppDest
	psn  uint32
	// rxDepth receives stay posted; each uses its own buffer after the
	// send buffer.
	rxDepth int
	slot    int // bytes per buffer: size, plus the GRH's 40 on UD
}

const ppGRH = 40

func runPingpong(cfg *config) error {
	c, err := oobControl(cfg, "pingpong")
	if err != nil {
		return err
	}
	defer c.Close()
	local := controlIP(c)
	p, err := newPingpong(cfg, local)
	if err != nil {
		return err
	}
	defer p.dev.Close()
	ours := ppDest{qpn: p.qp.QPN(), psn: p.psn, gid: gidOf(advertisedAddr(p.dev, local))}
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if err := p.exchange(c, &ours); err != nil {
		return err
	}
	c.SetDeadline(time.Time{})
	start := time.Now()
	if err := p.run(); err != nil {
		return err
	}
	took := time.Since(start)
	p.report(os.Stdout, took)
	return nil
}

// exchange trades addresses as the tools do, and connects the QP in
// between: the server only answers once its QP is ready to receive.
func (p *pingpong) exchange(c net.Conn, ours *ppDest) error {
	msg := make([]byte, ppDestLen)
	if p.cfg.Server != "" {
		if _, err := c.Write(ours.marshal()); err != nil {
			return err
		}
		if _, err := io.ReadFull(c, msg); err != nil {
			return fmt.Errorf("pingpong: reading the server's address: %w", err)
		}
		peer, err := parsePPDest(msg)
		if err != nil {
			return err
		}
		if err := p.connect(peer); err != nil {
			return err
		}
		_, err = c.Write([]byte(ppDone))
		return err
	}
	if _, err := io.ReadFull(c, msg); err != nil {
		return fmt.Errorf("pingpong: reading the client's address: %w", err)
	}
	peer, err := parsePPDest(msg)
	if err != nil {
		return err
	}
	if err := p.connect(peer); err != nil {
		return err
	}
	if _, err := c.Write(ours.marshal()); err != nil {
		return err
	}
	done := make([]byte, len(ppDone))
	if _, err := io.ReadFull(c, done); err != nil || string(done) != ppDone {
		return fmt.Errorf("pingpong: the client did not finish the exchange: %q %v", done, err)
	}
	return nil
}

func newPingpong(cfg *config, local netip.Addr) (*pingpong, error) {
	p := &pingpong{cfg: cfg, ud: cfg.Conn == "UD", rxDepth: min(cfg.Iters, 500) + 1}
	dev, err := openOOBDevice(cfg, local)
	if err != nil {
		return nil, err
	}
	p.dev = dev
	fail := func(err error) (*pingpong, error) { dev.Close(); return nil, err }
	p.slot = cfg.Size
	if p.ud {
		p.slot += ppGRH
	}
	if p.pd, err = dev.AllocPD(); err != nil {
		return fail(err)
	}
	if p.cq, err = dev.CreateCQ(2*p.rxDepth + 8); err != nil {
		return fail(err)
	}
	buf := make([]byte, (p.rxDepth+1)*p.slot)
	for i := range buf[:p.slot] {
		buf[i] = byte(i)
	}
	if p.mr, err = p.pd.RegMR(buf, vroce.AccessLocalWrite); err != nil {
		return fail(err)
	}
	typ := vroce.RC
	if p.ud {
		typ = vroce.UD
	}
	p.qp, err = p.pd.CreateQP(vroce.QPInitAttr{Type: typ, SendCQ: p.cq, RecvCQ: p.cq,
		Cap: vroce.QPCap{MaxSendWR: 2, MaxRecvWR: p.rxDepth, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return fail(err)
	}
	p.psn = randomPSN()
	return p, nil
}

// connect moves the QP to RTS aimed at peer and posts the receives, all
// before this end's last word of the exchange, as the tools do: a UD
// datagram that finds no receive is lost.
func (p *pingpong) connect(peer ppDest) error {
	if err := p.connectQP(peer); err != nil {
		return err
	}
	for k := range p.rxDepth {
		if err := p.postRecv(k); err != nil {
			return err
		}
	}
	return nil
}

// connectQP moves the QP to RTS with the attributes the tools use: path
// MTU -m (1024), min RNR timer 12, timeout 14, seven retries, one
// READ/atomic each way (cm.Connect's defaults, but for those it is told).
func (p *pingpong) connectQP(peer ppDest) error {
	p.peer = peer
	dest := netip.AddrPortFrom(peer.addr(), 4791)
	if p.ud {
		if err := readyUD(p.qp, ppQKey, p.psn); err != nil {
			return err
		}
		ah, err := p.pd.CreateAH(dest)
		if err != nil {
			return err
		}
		p.ah = ah
		return nil
	}
	mtu := vroce.MTU(p.cfg.MTU)
	if mtu == 0 {
		mtu = vroce.MTU1024
	}
	err := cm.Connect(p.qp, p.psn, cm.Peer{QPN: peer.qpn, PSN: peer.psn, Addr: dest, MTU: mtu, MaxRdAtomic: 1},
		cm.Params{MinRNRTimer: 12, MaxRdAtomic: 1})
	if err != nil {
		return fmt.Errorf("pingpong: connect to %v: %w", dest, err)
	}
	return nil
}

const (
	ppSendID = 1 << 62 // work request IDs: sends; receives are their buffer's index
)

func (p *pingpong) postRecv(k int) error {
	off := (1 + k%p.rxDepth) * p.slot
	return p.qp.PostRecv(vroce.RecvWR{ID: uint64(k % p.rxDepth), SGL: []vroce.SGE{p.mr.SGE(off, p.slot)}})
}

func (p *pingpong) postSend() error {
	wr := vroce.SendWR{ID: ppSendID, Opcode: vroce.WRSend, Flags: vroce.SendSignaled, SGL: []vroce.SGE{p.mr.SGE(0, p.cfg.Size)}}
	if p.ud {
		wr.SGL = []vroce.SGE{p.mr.SGE(ppGRH, p.cfg.Size)}
		wr.AH, wr.RemoteQPN, wr.RemoteQKey = p.ah, p.peer.qpn, ppQKey
	}
	return p.qp.PostSend(wr)
}

// run plays the ping-pong as the tools do: the client sends first, and
// each end sends again once nothing it waits for is pending (its last
// send and a receive), until iters sends and iters receives completed;
// every receive must bring size bytes (and the GRH on UD).
func (p *pingpong) run() error {
	const recvPending, sendPending = 1, 2
	iters := p.cfg.Iters
	pending, sent, rcvd := recvPending, 0, 0
	if p.cfg.Server != "" {
		if err := p.postSend(); err != nil {
			return err
		}
		pending |= sendPending
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(iters)*time.Second+30*time.Second)
	defer cancel()
	wcs := make([]vroce.WorkCompletion, 16)
	want := p.slot
	for rcvd < iters || sent < iters {
		n, err := p.cq.PollWait(ctx, wcs)
		if err != nil {
			return fmt.Errorf("pingpong: after %d sends and %d receives: %w (QP %v, %+v)", sent, rcvd, err, p.qp.State(), p.qp.Stats())
		}
		for _, wc := range wcs[:n] {
			if wc.Status != vroce.WCSuccess {
				return fmt.Errorf("pingpong: %v work completion %#x failed: %v", wc.Opcode, wc.ID, wc.Status)
			}
			if wc.ID == ppSendID {
				sent++
				pending &^= sendPending
			} else {
				if int(wc.ByteLen) != want {
					return fmt.Errorf("pingpong: receive %d brought %d bytes, want %d", rcvd, wc.ByteLen, want)
				}
				rcvd++
				pending &^= recvPending
				if err := p.postRecv(int(wc.ID)); err != nil {
					return err
				}
			}
			if sent < iters && pending == 0 {
				if err := p.postSend(); err != nil {
					return err
				}
				pending = recvPending | sendPending
			}
		}
	}
	return nil
}

// report prints the tools' two summary lines and the transport's work.
func (p *pingpong) report(w io.Writer, took time.Duration) {
	bytes := int64(p.cfg.Size) * int64(p.cfg.Iters) * 2
	secs := took.Seconds()
	fmt.Fprintf(w, "%d bytes in %.2f seconds = %.2f Mbit/sec\n", bytes, secs, float64(bytes)*8/secs/1e6)
	fmt.Fprintf(w, "%d iters in %.2f seconds = %.2f usec/iter\n", p.cfg.Iters, secs, secs*1e6/float64(p.cfg.Iters))
	s, d := p.qp.Stats(), p.dev.Stats()
	fmt.Fprintf(w, "peer %v QPN %#x: %d packets sent, %d received, %d retransmitted, %d timeouts\n",
		p.peer.addr(), p.peer.qpn, s.TxPackets, s.RxPackets, s.Retransmits, s.Timeouts)
	printRefusals(w, refusals(d))
}
