package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"

	"vroce.dev/vroce"
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
	ring   int // message slots per QP
	region int // bytes per QP
	mtu    vroce.MTU
}

// info is what one side tells the other to connect and to address its
// memory.
type info struct {
	Addr string   `json:"addr"`
	QPNs []uint32 `json:"qpns"`
	PSNs []uint32 `json:"psns"`
	RKey uint32   `json:"rkey"`
	VA   uint64   `json:"va"`
	MTU  int      `json:"mtu"`
	SACK bool     `json:"sack"` // speaks selective repeat
}

const maxBuffer = 4 << 30

func newSide(cfg *config, devCfg vroce.Config) (*side, error) {
	s := &side{cfg: cfg, ring: 1}
	if !cfg.isLat() {
		s.ring = cfg.TxDepth
	}
	s.region = s.ring * cfg.Size
	if total := int64(s.region) * int64(cfg.QPs); total > maxBuffer {
		return nil, fmt.Errorf("buffers of %d bytes (size x tx-depth x qps) exceed %d", total, int64(maxBuffer))
	}
	dev, err := vroce.Open(devCfg)
	if err != nil {
		return nil, err
	}
	s.dev = dev
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

// info describes this side, reachable at ip (the address the peer's
// control connection sees).
func (s *side) info(ip netip.Addr, psns []uint32) info {
	in := info{RKey: s.mr.RKey(), VA: s.mr.Addr(), MTU: int(s.mtu), PSNs: psns, SACK: !s.cfg.GoBackN}
	in.Addr = netip.AddrPortFrom(ip, s.dev.LocalAddr().Port()).String()
	for _, qp := range s.qps {
		in.QPNs = append(in.QPNs, qp.QPN())
	}
	return in
}

func randomPSNs(n int) []uint32 {
	p := make([]uint32, n)
	for i := range p {
		p[i] = rand.Uint32() & 0xffffff
	}
	return p
}

// connect moves every QP to RTS aimed at the peer's QP of the same index.
func (s *side) connect(own []uint32, peer info) error {
	if len(peer.QPNs) != len(s.qps) {
		return fmt.Errorf("peer has %d QPs, want %d", len(peer.QPNs), len(s.qps))
	}
	dest, err := netip.ParseAddrPort(peer.Addr)
	if err != nil {
		return fmt.Errorf("peer address %q: %w", peer.Addr, err)
	}
	s.mtu = min(s.mtu, vroce.MTU(peer.MTU))
	access := vroce.AccessLocalWrite | vroce.AccessRemoteWrite | vroce.AccessRemoteRead | vroce.AccessRemoteAtomic
	for i, qp := range s.qps {
		steps := []struct {
			a vroce.QPAttr
			m vroce.QPAttrMask
		}{
			{vroce.QPAttr{State: vroce.QPSInit, AccessFlags: access}, vroce.QPAttrState | vroce.QPAttrAccessFlags},
			{vroce.QPAttr{State: vroce.QPSRTR, Dest: dest, PathMTU: s.mtu, DestQPN: peer.QPNs[i], RQPSN: peer.PSNs[i], MaxDestRdAtomic: 16, MinRNRTimer: 1,
				SelectiveRepeat: peer.SACK && !s.cfg.GoBackN},
				vroce.QPAttrState | vroce.QPAttrAV | vroce.QPAttrPathMTU | vroce.QPAttrDestQPN | vroce.QPAttrRQPSN | vroce.QPAttrMaxDestRdAtomic | vroce.QPAttrMinRNRTimer | vroce.QPAttrSelectiveRepeat},
			{vroce.QPAttr{State: vroce.QPSRTS, SQPSN: own[i], Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16},
				vroce.QPAttrState | vroce.QPAttrSQPSN | vroce.QPAttrTimeout | vroce.QPAttrRetryCnt | vroce.QPAttrRNRRetry | vroce.QPAttrMaxQPRdAtomic},
		}
		for _, st := range steps {
			if err := qp.Modify(&st.a, st.m); err != nil {
				return err
			}
		}
	}
	return nil
}

// slot is where message slot k of QP q lives, as an offset in the buffer.
func (s *side) slot(q, k int) int { return q*s.region + (k%s.ring)*s.cfg.Size }

// credit is where credit receive k of QP q lands, after the message slots:
// each outstanding receive has its own, so a credit arriving never
// overwrites one being read.
func (s *side) credit(q, k int) int {
	return s.region*len(s.qps) + (q*s.ring+k%s.ring)*creditSize
}

// counters fills r with the transport counters of the side's QPs.
func (s *side) counters(r *result) {
	for _, qp := range s.qps {
		st := qp.Stats()
		r.Retransmits += st.Retransmits
		r.Timeouts += st.Timeouts
		r.FastRetransmits += st.FastRetransmits
		r.TailProbes += st.TailProbes
		r.Spurious += st.SpuriousTimeouts
		r.CWnd += st.CWnd
		r.SRTT = max(r.SRTT, float64(st.SRTT)/1e3)
	}
}

// control is the TCP control connection: JSON lines, then raw bytes for
// the TCP comparison, all read through one buffered reader.
type control struct {
	conn net.Conn
	r    *bufio.Reader
}

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

// pattern fills b with the words of message i: each 8 bytes hold i and
// their offset, so a misplaced, stale or corrupted byte shows.
func pattern(b []byte, i uint64) {
	var w [8]byte
	for off := 0; off < len(b); off += 8 {
		binary.LittleEndian.PutUint64(w[:], i<<32^uint64(off)^0x5bd1e995)
		copy(b[off:], w[:])
	}
}

// checkPattern reports the first offset where b is not message i.
func checkPattern(b []byte, i uint64) (int, bool) {
	var w [8]byte
	for off := 0; off < len(b); off += 8 {
		binary.LittleEndian.PutUint64(w[:], i<<32^uint64(off)^0x5bd1e995)
		n := min(8, len(b)-off)
		if string(b[off:off+n]) != string(w[:n]) {
			return off, false
		}
	}
	return 0, true
}
