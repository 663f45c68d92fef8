package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"vroce.dev/providers/sim"
	"vroce.dev/vroce"
	"vroce.dev/vroce/cm"
)

// conn_rate: how fast RC QPs connect, and what an idle connected QP
// costs. The client connects --qps QPs with --concurrency connects in
// flight, by RDMA_CM (through a listen backlog of --backlog) or by the
// SOCKET exchange (a TCP connection each); both ends measure their memory
// before and after.

// connInfo is the server's answer to a conn_rate hello.
type connInfo struct {
	DevPort    uint16 `json:"dev_port"`    // cm: the device (and service) port
	SocketPort int    `json:"socket_port"` // socket: the TCP port to dial
	Error      string `json:"error,omitempty"`
}

// connDone closes a conn_rate run: the client's count, then the server's
// memory.
type connDone struct {
	Established int     `json:"established"`
	HeapPerQP   float64 `json:"heap_per_qp"`
	RSSPerQP    float64 `json:"rss_per_qp"`
	Error       string  `json:"error,omitempty"`
}

// memory is a process's memory at a moment: the live Go heap, and the
// resident set after returning free pages to the OS.
type memory struct{ heap, rss int64 }

func measureMemory() memory {
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	m := memory{heap: int64(ms.HeapAlloc)}
	if b, err := os.ReadFile("/proc/self/statm"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 1 {
			pages, _ := strconv.ParseInt(f[1], 10, 64)
			m.rss = pages * int64(os.Getpagesize())
		}
	}
	return m
}

// perQP is the growth from m to later, per QP (never below zero).
func (m memory) perQP(later memory, n int) (heap, rss float64) {
	if n == 0 {
		return 0, 0
	}
	return max(0, float64(later.heap-m.heap)/float64(n)), max(0, float64(later.rss-m.rss)/float64(n))
}

// connSide is one end of a conn_rate run: a device, a CQ every QP shares,
// the QPs, and the connection manager in cm mode.
type connSide struct {
	cfg *config
	dev *vroce.Device
	pd  *vroce.PD
	cq  *vroce.CQ
	m   *cm.Manager

	mu  sync.Mutex
	qps []*vroce.QP
}

func newConnSide(cfg *config, dc vroce.Config) (*connSide, error) {
	dc.MaxQP = max(vroce.DefaultMaxQP, cfg.QPs)
	dev, err := vroce.Open(dc)
	if err != nil {
		return nil, err
	}
	s := &connSide{cfg: cfg, dev: dev}
	if s.pd, err = dev.AllocPD(); err == nil {
		s.cq, err = dev.CreateCQ(1 << 16)
	}
	if err == nil && cfg.Mode == "cm" {
		s.m, err = cm.New(dev, cm.Config{MaxBacklog: max(cfg.Backlog, cm.DefaultMaxBacklog)})
	}
	if err != nil {
		dev.Close()
		return nil, err
	}
	return s, nil
}

func (s *connSide) newQP() (*vroce.QP, error) {
	qp, err := s.pd.CreateQP(vroce.QPInitAttr{Type: vroce.RC, SendCQ: s.cq, RecvCQ: s.cq,
		Cap: vroce.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.qps = append(s.qps, qp)
	s.mu.Unlock()
	return qp, nil
}

func (s *connSide) close() {
	if s.m != nil {
		s.m.Close()
	}
	s.dev.Close()
}

func (s *connSide) params() cm.Params {
	return cm.Params{Access: vroce.AccessRemoteWrite, GoBackN: s.cfg.GoBackN}
}

// driveConnRate is the client's conn_rate.
func driveConnRate(cfg *config, c *control, network *sim.Network) ([]*result, error) {
	if err := c.send(hello{Version: protocolVersion, Params: cfg.params}); err != nil {
		return nil, err
	}
	var ci connInfo
	if err := c.recv(&ci); err != nil {
		return nil, err
	}
	if ci.Error != "" {
		return nil, errors.New("server: " + ci.Error)
	}
	serverIP := c.conn.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
	before := measureMemory()
	s, err := newConnSide(cfg, cfg.devConfig("client", network))
	if err != nil {
		return nil, err
	}
	defer s.close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var next, established atomic.Int64
	var firstErr error
	var errOnce sync.Once
	connect := func() error {
		qp, err := s.newQP()
		if err != nil {
			return err
		}
		if cfg.Mode == "cm" {
			_, err = s.m.Connect(ctx, qp, netip.AddrPortFrom(serverIP, ci.DevPort), s.params())
			return err
		}
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(serverIP.String(), strconv.Itoa(ci.SocketPort)))
		if err != nil {
			return err
		}
		defer conn.Close()
		p := s.params()
		if a := s.dev.LocalAddr(); a.Addr().IsUnspecified() {
			p.Advertise = netip.AddrPortFrom(controlIP(conn), a.Port())
		}
		_, err = cm.ConnectSocket(ctx, conn, qp, p)
		return err
	}
	start := time.Now()
	prog := newConnProgress(cfg, &established, start)
	var wg sync.WaitGroup
	for range min(cfg.Concurrency, cfg.QPs) {
		wg.Go(func() {
			for next.Add(1) <= int64(cfg.QPs) {
				if err := connect(); err != nil {
					errOnce.Do(func() { firstErr = err; cancel() })
					return
				}
				established.Add(1)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	prog.stop()
	after := measureMemory()
	heap, rss := before.perQP(after, cfg.QPs)

	r := &result{Test: cfg.Test, Provider: cfg.Provider, Mode: cfg.Mode, QPs: cfg.QPs, Backlog: cfg.Backlog,
		Established: int(established.Load()), Seconds: elapsed.Seconds(), BytesPerQP: heap, RSSPerQP: rss}
	r.ConnsPerSec = float64(r.Established) / r.Seconds
	if s.m != nil {
		st := s.m.Stats()
		r.CMRetransmits = st.Retransmits
		r.Refused = refusals(s.dev.Stats())
		addRefusal(&r.Refused, "cm_backlog_drops", st.BacklogDrops)
		addRefusal(&r.Refused, "cm_malformed", st.Malformed)
	}
	if err := c.send(connDone{Established: r.Established}); err != nil {
		return nil, err
	}
	var sd connDone
	if err := c.recv(&sd); err != nil {
		return nil, err
	}
	r.ServerBytesPerQP, r.ServerRSSPerQP = sd.HeapPerQP, sd.RSSPerQP
	if cfg.Loopback {
		// Both ends live in this process: the client's measurement holds
		// both, so each end's share is half.
		r.BytesPerQP, r.RSSPerQP = heap/2, rss/2
		r.ServerBytesPerQP, r.ServerRSSPerQP = heap/2, rss/2
	}
	if firstErr != nil {
		return []*result{r}, fmt.Errorf("%d of %d connected: %w", r.Established, cfg.QPs, firstErr)
	}
	if sd.Error != "" {
		return []*result{r}, errors.New("server: " + sd.Error)
	}
	if sd.Established != r.Established {
		return []*result{r}, fmt.Errorf("the client connected %d QPs, the server %d", r.Established, sd.Established)
	}
	return []*result{r}, nil
}

// serveConnRate is the server's conn_rate: it accepts until the client
// says it is done.
func serveConnRate(cfg, run *config, c *control, network *sim.Network) error {
	before := measureMemory()
	s, err := newConnSide(run, run.devConfig("server", network))
	if err != nil {
		c.send(connInfo{Error: err.Error()})
		return err
	}
	defer s.close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var established atomic.Int64
	var wg sync.WaitGroup
	ci := connInfo{DevPort: s.dev.LocalAddr().Port()}
	if run.Mode == "cm" {
		l, err := s.m.Listen(0, run.Backlog)
		if err != nil {
			c.send(connInfo{Error: err.Error()})
			return err
		}
		defer l.Close()
		for range 2 {
			wg.Go(func() {
				for {
					req, err := l.Accept(ctx)
					if err != nil {
						return
					}
					qp, err := s.newQP()
					if err != nil {
						req.Reject(cm.RejectNoQP, nil)
						continue
					}
					if _, err := req.Accept(qp, s.params()); err == nil {
						established.Add(1)
					}
				}
			})
		}
	} else {
		ln, err := net.Listen("tcp", net.JoinHostPort(controlIP(c.conn).String(), "0"))
		if err != nil {
			c.send(connInfo{Error: err.Error()})
			return err
		}
		defer ln.Close()
		ci.SocketPort = ln.Addr().(*net.TCPAddr).Port
		stop := context.AfterFunc(ctx, func() { ln.Close() })
		defer stop()
		wg.Go(func() {
			var handlers sync.WaitGroup
			defer handlers.Wait()
			for {
				conn, err := ln.Accept()
				if err != nil {
					return
				}
				handlers.Go(func() {
					defer conn.Close()
					qp, err := s.newQP()
					if err != nil {
						return
					}
					p := s.params()
					if a := s.dev.LocalAddr(); a.Addr().IsUnspecified() {
						p.Advertise = netip.AddrPortFrom(controlIP(conn), a.Port())
					}
					if _, err := cm.ConnectSocket(ctx, conn, qp, p); err == nil {
						established.Add(1)
					}
				})
			}
		})
	}
	if err := c.send(ci); err != nil {
		return err
	}
	var cd connDone
	if err := c.recv(&cd); err != nil {
		return err
	}
	cancel()
	wg.Wait()
	heap, rss := before.perQP(measureMemory(), int(established.Load()))
	return c.send(connDone{Established: int(established.Load()), HeapPerQP: heap, RSSPerQP: rss})
}

// connProgress prints the count now and then on long runs.
type connProgress struct {
	stopc chan struct{}
	done  chan struct{}
}

func newConnProgress(cfg *config, n *atomic.Int64, start time.Time) *connProgress {
	p := &connProgress{stopc: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		t := time.NewTicker(2 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-p.stopc:
				return
			case <-t.C:
				if !cfg.JSON && !cfg.quietProg {
					fmt.Fprintf(os.Stderr, "vroce-perf: %d of %d connected after %.1f s\n", n.Load(), cfg.QPs, time.Since(start).Seconds())
				}
			}
		}
	}()
	return p
}

func (p *connProgress) stop() {
	close(p.stopc)
	<-p.done
}
