package main

import (
	"encoding/binary"
	"fmt"
	"time"

	"vroce.dev/internal/workload"
	"vroce.dev/vroce"
)

// The latency tests run on one QP. send_lat and write_lat are ping-pongs
// and report half the round trip, as perftest does; read_lat and
// atomic_lat report the whole round trip of each operation. write_lat
// signals each arrival with WRITE_WITH_IMM where perftest polls memory:
// Go's memory model gives polling no ordering, a completion does (with
// --oob perftest it polls, as ib_write_lat must be answered: memwait.go).

// pingOp is the operation the ping-pong tests send.
func (s *side) pingOp() vroce.WROpcode {
	if s.cfg.Test == "write_lat" {
		return vroce.WRRDMAWriteWithImm
	}
	return vroce.WRSendWithImm
}

// pingWR builds message i of the ping-pong (pong if reply), filling the
// data in verify mode.
func (s *side) pingWR(peer info, i int) vroce.SendWR {
	cfg := s.cfg
	wr := vroce.SendWR{Opcode: s.pingOp(), Imm: uint32(i), RemoteAddr: peer.VA, RKey: peer.RKey}
	if cfg.Verify {
		workload.Pattern(s.buf[:cfg.Size], uint64(i))
	}
	if cfg.Inline > 0 {
		wr.Flags = vroce.SendInline
		wr.Inline = s.buf[:cfg.Size]
	} else {
		wr.SGL = []vroce.SGE{s.mr.SGE(0, cfg.Size)}
	}
	return wr
}

// awaitRecv waits for the next arrival and checks it is message i.
func (s *side) awaitRecv(p *poller, i int) error {
	for {
		wcs, err := p.next(s.cfg.Test)
		if err != nil {
			return err
		}
		for _, wc := range wcs {
			if wc.Opcode != vroce.WCRecv && wc.Opcode != vroce.WCRecvRDMAWithImm {
				continue
			}
			if wc.Imm != uint32(i) {
				return fmt.Errorf("%s: message %d arrived, want %d", s.cfg.Test, wc.Imm, i)
			}
			if s.cfg.Verify {
				if at, ok := workload.CheckPattern(s.buf[:s.cfg.Size], uint64(i)); !ok {
					return fmt.Errorf("%s: message %d: byte %d differs", s.cfg.Test, i, at)
				}
			}
			return s.qps[0].PostRecv(vroce.RecvWR{SGL: []vroce.SGE{s.mr.SGE(0, s.cfg.Size)}})
		}
	}
}

func (s *side) clientLat(peer info) (*result, error) {
	cfg := s.cfg
	qp := s.qps[0]
	p := newPoller(s.cq, 16)
	defer p.close()
	samples := make([]time.Duration, 0, cfg.Iters)
	prog := &progress{side: s, test: cfg.Test, start: time.Now(), last: time.Now(), total: cfg.Iters, quiet: cfg.quietProg}
	ping := cfg.Test == "send_lat" || cfg.Test == "write_lat"
	if ping {
		if err := qp.PostRecv(vroce.RecvWR{SGL: []vroce.SGE{s.mr.SGE(0, cfg.Size)}}); err != nil {
			return nil, err
		}
	}
	start := time.Now()
	for i := 0; i < cfg.Iters; i++ {
		var wr vroce.SendWR
		switch cfg.Test {
		case "read_lat":
			wr = vroce.SendWR{Opcode: vroce.WRRDMARead, Flags: vroce.SendSignaled, SGL: []vroce.SGE{s.mr.SGE(0, cfg.Size)}, RemoteAddr: peer.VA, RKey: peer.RKey}
		case "atomic_lat":
			wr = vroce.SendWR{Opcode: vroce.WRAtomicFetchAndAdd, Flags: vroce.SendSignaled, SGL: []vroce.SGE{s.mr.SGE(0, 8)}, RemoteAddr: peer.VA, RKey: peer.RKey, CompareAdd: 1}
		default:
			wr = s.pingWR(peer, 2*i)
		}
		t0 := time.Now()
		if err := qp.PostSend(wr); err != nil {
			return nil, err
		}
		if ping {
			if err := s.awaitRecv(p, 2*i+1); err != nil {
				return nil, err
			}
			samples = append(samples, time.Since(t0)/2)
		} else {
			if _, err := p.next(cfg.Test); err != nil {
				return nil, err
			}
			samples = append(samples, time.Since(t0))
			if err := s.checkLat(i); err != nil {
				return nil, err
			}
		}
		prog.update(i + 1)
	}
	r := s.newResult()
	r.setLatency(samples, time.Since(start))
	r.Verified = cfg.Verify
	return r, nil
}

// checkLat verifies what a read or an atomic brought back.
func (s *side) checkLat(i int) error {
	if !s.cfg.Verify {
		return nil
	}
	if s.cfg.Test == "atomic_lat" {
		if got := binary.NativeEndian.Uint64(s.buf); got != uint64(i) {
			return fmt.Errorf("atomic_lat: fetch-add %d returned %d", i, got)
		}
		return nil
	}
	if at, ok := workload.CheckPattern(s.buf[:s.cfg.Size], 7); !ok {
		return fmt.Errorf("read_lat: iteration %d: byte %d differs", i, at)
	}
	return nil
}

// serverLat answers the ping-pongs (serverPrepare posted the first
// receive); read and atomic need nothing from it.
func (s *side) serverLat(peer info) error {
	cfg := s.cfg
	if cfg.Test == "read_lat" || cfg.Test == "atomic_lat" {
		return nil
	}
	qp := s.qps[0]
	p := newPoller(s.cq, 16)
	defer p.close()
	for i := 0; i < cfg.Iters; i++ {
		if err := s.awaitRecv(p, 2*i); err != nil {
			return err
		}
		if err := qp.PostSend(s.pingWR(peer, 2*i+1)); err != nil {
			return err
		}
	}
	return nil
}
