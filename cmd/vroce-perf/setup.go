package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"time"

	"vroce.dev/vroce"
	"vroce.dev/vroce/cm"
)

// side is one end of a test: a device with one CQ, one registered buffer
// divided into a region per QP, and the QPs.
type side struct {
	cfg    *config
	dev    *vroce.Device
	pd     *vroce.PD
	cq     *vroce.CQ
	mr     *vroce.MR
	buf    []byte
	qps    []*vroce.QP
	ring   int // messages in flight per QP (tx-depth; the receives posted)
	region int // bytes per QP
	slots  int // message buffers per QP: ring with --verify, else one
	mtu    vroce.MTU
	opened time.Duration // how long vroce.Open took (a plugin's launch too)
}

// info tells the other side where this side's memory is; the QPs connect
// through vroce/cm.
type info struct {
	RKey uint32 `json:"rkey"`
	VA   uint64 `json:"va"`
}

const maxBuffer = 4 << 30

func newSide(cfg *config, devCfg vroce.Config) (*side, error) {
	s := &side{cfg: cfg, ring: 1}
	if !cfg.isLat() {
		s.ring = cfg.TxDepth
	}
	// Without --verify every message of a QP uses one buffer, as
	// perftest does and as the TCP comparison's one write buffer does:
	// cycling through tx-depth buffers (8 MiB of 64 KiB messages) would
	// measure cache misses that neither pays. --verify gives each
	// message in flight its own buffer, so each can be checked.
	s.slots = 1
	if cfg.Verify {
		s.slots = s.ring
	}
	s.region = s.slots * cfg.Size
	if total := int64(s.region) * int64(cfg.QPs); total > maxBuffer {
		return nil, fmt.Errorf("buffers of %d bytes (size x qps, x tx-depth with --verify) exceed %d", total, int64(maxBuffer))
	}
	start := time.Now()
	dev, err := vroce.Open(devCfg)
	if err != nil {
		return nil, err
	}
	s.dev, s.opened = dev, time.Since(start)
	fail := func(err error) (*side, error) { dev.Close(); return nil, err }
	s.mtu = dev.Attr().ActiveMTU
	if cfg.MTU != 0 {
		s.mtu = min(s.mtu, vroce.MTU(cfg.MTU))
	}
	if s.pd, err = dev.AllocPD(); err != nil {
		return fail(err)
	}
	depth := cfg.QPs * (cfg.TxDepth + s.ring + 16) * 2
	if s.cq, err = dev.CreateCQ(depth); err != nil {
		return fail(err)
	}
	s.buf = make([]byte, s.region*cfg.QPs+s.ring*creditSize*cfg.QPs)
	access := vroce.AccessLocalWrite | vroce.AccessRemoteWrite | vroce.AccessRemoteRead | vroce.AccessRemoteAtomic
	if s.mr, err = s.pd.RegMR(s.buf, access); err != nil {
		return fail(err)
	}
	for i := 0; i < cfg.QPs; i++ {
		qp, err := s.pd.CreateQP(vroce.QPInitAttr{Type: vroce.RC, SendCQ: s.cq, RecvCQ: s.cq, Cap: vroce.QPCap{
			MaxSendWR: cfg.TxDepth + 8, MaxRecvWR: s.ring + 8, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 256}})
		if err != nil {
			return fail(err)
		}
		s.qps = append(s.qps, qp)
	}
	return s, nil
}

func (s *side) close() { s.dev.Close() }

func (s *side) info() info { return info{RKey: s.mr.RKey(), VA: s.mr.Addr()} }

// connect connects every QP to the peer's QP of the same index with the
// SOCKET exchange of vroce/cm over the control connection, advertising ip
// when the device listens on all addresses.
func (s *side) connect(c *control, ip netip.Addr) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := cm.Params{
		Access:  vroce.AccessRemoteWrite | vroce.AccessRemoteRead | vroce.AccessRemoteAtomic,
		MTU:     s.mtu,
		GoBackN: s.cfg.GoBackN,
	}
	if a := s.dev.LocalAddr(); a.Addr().IsUnspecified() {
		p.Advertise = netip.AddrPortFrom(ip, a.Port())
	}
	for i, qp := range s.qps {
		peer, err := cm.ConnectSocket(ctx, c.buffered(), qp, p)
		if err != nil {
			return fmt.Errorf("connect QP %d: %w", i, err)
		}
		s.mtu = peer.MTU
	}
	return nil
}

// slot is where message slot k of QP q lives, as an offset in the buffer.
func (s *side) slot(q, k int) int { return q*s.region + (k%s.slots)*s.cfg.Size }

// credit is where credit receive k of QP q lands, after the message slots:
// each outstanding receive has its own, so a credit arriving never
// overwrites one being read.
func (s *side) credit(q, k int) int {
	return s.region*len(s.qps) + (q*s.ring+k%s.ring)*creditSize
}

// counters fills r with the transport counters of the side's QPs.
func (s *side) counters(r *result) {
	r.Refused = refusals(s.dev.Stats())
	for _, qp := range s.qps {
		st := qp.Stats()
		r.Retransmits += st.Retransmits
		r.Timeouts += st.Timeouts
		r.FastRetransmits += st.FastRetransmits
		r.TailProbes += st.TailProbes
		r.Spurious += st.SpuriousTimeouts
		r.StallHolds += st.SendStallHolds
		r.RNRWaits += st.RNRNAKsRecv
		r.ACKs += st.ACKsSent
		r.PiggyACKs += st.PiggyACKsSent
		r.CWnd += st.CWnd
		r.SRTT = max(r.SRTT, float64(st.SRTT)/1e3)
	}
}

// control is the TCP control connection: JSON lines, the QP exchanges,
// then raw bytes for the TCP comparison, all read through one buffered
// reader.
type control struct {
	conn net.Conn
	r    *bufio.Reader
}

// bufferedConn reads through the control connection's buffer, which may
// already hold the peer's next message.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (b bufferedConn) Read(p []byte) (int, error) { return b.r.Read(p) }

func (c *control) buffered() net.Conn { return bufferedConn{c.conn, c.r} }

func newControl(c net.Conn) *control { return &control{conn: c, r: bufio.NewReaderSize(c, 1<<16)} }

func (c *control) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = c.conn.Write(append(b, '\n'))
	return err
}

func (c *control) recv(v any) error {
	line, err := c.r.ReadBytes('\n')
	if err != nil {
		return fmt.Errorf("control connection: %w", err)
	}
	return json.Unmarshal(line, v)
}
