package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"vroce.dev/internal/workload"
	"vroce.dev/vroce"
)

// The bandwidth tests. The client keeps tx-depth work requests in flight
// per QP; iteration i runs on QP i%qps in message slot i/qps of it.

const waitLimit = 60 * time.Second

// poller waits for completions and fails on the first bad one, or once
// none has come for waitLimit. One watchdog serves the whole run: a
// context per wait would add a runtime timer to every message timed.
type poller struct {
	cq       *vroce.CQ
	wc       []vroce.WorkCompletion
	ctx      context.Context
	cancel   context.CancelCauseFunc
	watchdog *time.Timer
	progress atomic.Uint64
	seen     uint64 // progress at the watchdog's last look (its own)
}

var errStalled = fmt.Errorf("no completion for %v", waitLimit)

func newPoller(cq *vroce.CQ, n int) *poller {
	p := &poller{cq: cq, wc: make([]vroce.WorkCompletion, n)}
	p.ctx, p.cancel = context.WithCancelCause(context.Background())
	p.watchdog = time.AfterFunc(waitLimit, p.checkStall)
	return p
}

func (p *poller) checkStall() {
	if now := p.progress.Load(); now != p.seen {
		p.seen = now
		p.watchdog.Reset(waitLimit)
		return
	}
	p.cancel(errStalled)
}

// close stops the watchdog.
func (p *poller) close() {
	p.watchdog.Stop()
	p.cancel(context.Canceled)
}

func (p *poller) next(what string) ([]vroce.WorkCompletion, error) {
	n, err := p.cq.PollWait(p.ctx, p.wc)
	if err != nil {
		if cause := context.Cause(p.ctx); cause != nil {
			err = cause
		}
		return nil, fmt.Errorf("%s: waiting for completions: %w", what, err)
	}
	p.progress.Add(1)
	for _, wc := range p.wc[:n] {
		if wc.Status != vroce.WCSuccess {
			return nil, fmt.Errorf("%s: work request %d (%v) failed: %v", what, wc.ID, wc.Opcode, wc.Status)
		}
	}
	return p.wc[:n], nil
}

// progress prints a line to stderr at most once a second for long runs.
type progress struct {
	side  *side
	test  string
	start time.Time
	last  time.Time
	total int
	quiet bool
}

func (p *progress) update(done int) {
	if p.quiet {
		return
	}
	now := time.Now()
	if now.Sub(p.last) < time.Second {
		return
	}
	p.last = now
	var r result
	if p.side != nil {
		p.side.counters(&r)
	}
	fmt.Fprintf(os.Stderr, "%s: %d of %d iterations (%.0f%%) after %.1fs; retransmissions %d, timeouts %d, window %d, SRTT %.0f us\n",
		p.test, done, p.total, 100*float64(done)/float64(p.total), now.Sub(p.start).Seconds(), r.Retransmits, r.Timeouts, r.CWnd, r.SRTT)
}

// creditSize is the size of the credit message the write_bw --verify
// receiver returns: how many messages of that QP it has checked.
const creditSize = 8

// clientBW runs the requester side of send_bw, write_bw and read_bw.
func (s *side) clientBW(peer info) (*result, error) {
	cfg := s.cfg
	nq := len(s.qps)
	verifyWrite := cfg.Verify && cfg.Test == "write_bw"
	op := map[string]vroce.WROpcode{"send_bw": vroce.WRSendWithImm, "write_bw": vroce.WRRDMAWrite, "read_bw": vroce.WRRDMARead}[cfg.Test]
	if verifyWrite {
		op = vroce.WRRDMAWriteWithImm
		for q, qp := range s.qps { // receives for the credits
			for k := 0; k < s.ring; k++ {
				if err := qp.PostRecv(vroce.RecvWR{ID: uint64(q), SGL: []vroce.SGE{s.mr.SGE(s.credit(q, k), creditSize)}}); err != nil {
					return nil, err
				}
			}
		}
	}
	if !cfg.Verify {
		workload.Pattern(s.buf, 1)
	}
	posted := make([]int, nq)    // per QP
	completed := make([]int, nq) // per QP
	credit := make([]int, nq)    // write --verify: messages the receiver has checked
	credits := make([]int, nq)   // credit messages received
	perQP := func(q int) int { return (cfg.Iters - q + nq - 1) / nq }
	totalDone := 0
	var marks []mark
	p := newPoller(s.cq, 256)
	defer p.close()
	prog := &progress{side: s, test: cfg.Test, start: time.Now(), last: time.Now(), total: cfg.Iters, quiet: cfg.quietProg}
	// Everything the send queue has room for goes in one post, as a
	// work request list: what tx-depth allows in flight, posted at once.
	wrs := make([]vroce.SendWR, 0, cfg.TxDepth)
	sges := make([]vroce.SGE, cfg.TxDepth) // one per request, reused
	start := time.Now()
	for totalDone < cfg.Iters {
		for q, qp := range s.qps {
			wrs = wrs[:0]
			for posted[q] < perQP(q) && posted[q]-completed[q] < cfg.TxDepth && len(wrs) < cap(wrs) {
				k := posted[q]
				if verifyWrite && k >= credit[q]+s.ring {
					break
				}
				i := uint64(k*nq + q)
				off := s.slot(q, k)
				if cfg.Verify && op != vroce.WRRDMARead {
					workload.Pattern(s.buf[off:off+cfg.Size], i)
				}
				sge := &sges[len(wrs)]
				*sge = s.mr.SGE(off, cfg.Size)
				wrs = append(wrs, vroce.SendWR{ID: uint64(q), Opcode: op, Flags: vroce.SendSignaled, Imm: uint32(k),
					SGL: sges[len(wrs) : len(wrs)+1], RemoteAddr: peer.VA + uint64(off), RKey: peer.RKey})
				posted[q]++
			}
			if len(wrs) > 0 {
				if err := qp.PostSend(wrs...); err != nil {
					return nil, err
				}
			}
		}
		wcs, err := p.next(cfg.Test)
		if err != nil {
			return nil, err
		}
		for _, wc := range wcs {
			q := int(wc.ID)
			if wc.Opcode == vroce.WCRecv { // a credit
				k := credits[q]
				credit[q] = int(binary.LittleEndian.Uint64(s.buf[s.credit(q, k):]))
				credits[q]++
				if err := s.qps[q].PostRecv(vroce.RecvWR{ID: uint64(q), SGL: []vroce.SGE{s.mr.SGE(s.credit(q, k), creditSize)}}); err != nil {
					return nil, err
				}
				continue
			}
			k := completed[q]
			if cfg.Verify && op == vroce.WRRDMARead {
				off := s.slot(q, k)
				if at, ok := workload.CheckPattern(s.buf[off:off+cfg.Size], uint64(k%s.ring)); !ok {
					return nil, fmt.Errorf("read_bw: iteration %d: byte %d differs", k*nq+q, at)
				}
			}
			completed[q]++
			totalDone++
		}
		if now := time.Since(start); len(marks) == 0 || now-marks[len(marks)-1].At >= peakWindow {
			marks = append(marks, mark{At: now, Bytes: int64(totalDone) * int64(cfg.Size)})
		}
		prog.update(totalDone)
	}
	elapsed := time.Since(start)
	r := s.newResult()
	r.setBandwidth(int64(cfg.Size)*int64(cfg.Iters), elapsed, marks)
	r.Verified = cfg.Verify
	return r, nil
}

// serverPrepare readies memory and posts the receives the client's first
// messages need.
func (s *side) serverPrepare() error {
	cfg := s.cfg
	switch cfg.Test {
	case "read_bw":
		for q := range s.qps {
			for k := 0; k < s.ring; k++ {
				off := s.slot(q, k)
				workload.Pattern(s.buf[off:off+cfg.Size], uint64(k))
			}
		}
	case "read_lat":
		workload.Pattern(s.buf[:cfg.Size], 7)
	case "atomic_lat":
		clear(s.buf[:8])
	case "send_lat", "write_lat":
		return s.qps[0].PostRecv(vroce.RecvWR{SGL: []vroce.SGE{s.mr.SGE(0, cfg.Size)}})
	case "send_bw", "write_bw":
		if cfg.Test == "write_bw" && !cfg.Verify {
			return nil
		}
		for q, qp := range s.qps {
			for k := 0; k < s.ring; k++ {
				if err := qp.PostRecv(vroce.RecvWR{ID: uint64(q), SGL: []vroce.SGE{s.mr.SGE(s.slot(q, k), cfg.Size)}}); err != nil {
					return err
				}
			}
		}
	}
	s.publish()
	return nil
}

// serverBW serves the bandwidth tests: for read and unverified write it
// has nothing to do; for send_bw and write_bw --verify it receives, checks
// each message and returns what the client needs.
func (s *side) serverBW() error {
	cfg := s.cfg
	if cfg.Test == "read_bw" || (cfg.Test == "write_bw" && !cfg.Verify) {
		return nil
	}
	nq := len(s.qps)
	got := make([]int, nq)
	p := newPoller(s.cq, 256)
	defer p.close()
	credit := make([]byte, creditSize)
	for total := 0; total < cfg.Iters; {
		wcs, err := p.next(cfg.Test + " server")
		if err != nil {
			return err
		}
		for _, wc := range wcs {
			if wc.Opcode != vroce.WCRecv && wc.Opcode != vroce.WCRecvRDMAWithImm {
				continue // a credit SEND completing
			}
			q := int(wc.ID)
			k := got[q]
			off := s.slot(q, k)
			if int(wc.ByteLen) != cfg.Size || wc.Imm != uint32(k) {
				return fmt.Errorf("%s: QP %d message %d: %d bytes, immediate %d", cfg.Test, q, k, wc.ByteLen, wc.Imm)
			}
			if cfg.Verify {
				if at, ok := workload.CheckPattern(s.buf[off:off+cfg.Size], uint64(k*nq+q)); !ok {
					return fmt.Errorf("%s: iteration %d: byte %d differs", cfg.Test, k*nq+q, at)
				}
			}
			got[q]++
			total++
			// The receive for slot k goes back before anything can need it.
			if err := s.qps[q].PostRecv(vroce.RecvWR{ID: uint64(q), SGL: []vroce.SGE{s.mr.SGE(off, cfg.Size)}}); err != nil {
				return err
			}
			if cfg.Test == "write_bw" && (got[q]%max(s.ring/4, 1) == 0 || total == cfg.Iters) {
				binary.LittleEndian.PutUint64(credit, uint64(got[q]))
				if err := s.qps[q].PostSend(vroce.SendWR{Opcode: vroce.WRSend, Flags: vroce.SendInline, Inline: credit}); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// publish orders this side's writes to its buffer before the device's
// reads of it (the device reads under the QP lock).
func (s *side) publish() {
	for _, qp := range s.qps {
		_ = qp.State()
	}
}

func (s *side) newResult() *result {
	r := &result{Test: s.cfg.Test, Provider: s.cfg.Provider, Bytes: s.cfg.Size, Iterations: s.cfg.Iters, QPs: len(s.qps), MTU: int(s.mtu)}
	r.UDPChecksum = len(s.qps) > 0 && s.qps[0].Attr().UDPChecksum
	s.counters(r)
	return r
}
