package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"syscall"
	"time"

	"vroce.dev/vroce"
	"vroce.dev/vroce/cm"
)

// perftest's -R (--rdma-cm): no TCP at all. Both of a run's connections
// go through RDMA_CM to the service port (18515): first a control QP,
// whose SENDs carry the exchange (the same messages as over TCP, but the
// QP records binary), then, after a sync, the test QP.

// pfControl is the -R control connection.
type pfControl struct {
	cfg      *config
	cm       *cm.Manager
	ln       *cm.Listener // server: both connections are accepted here
	ids      []*cm.ID
	conn     *pfConn
	qp       *vroce.QP
	cq       *vroce.CQ
	mr       *vroce.MR
	patience time.Duration
	// early holds a completion that came while another was awaited: the
	// peer's message can overtake the ACK of ours (both ends send their
	// record at once, and an ACK may wait to ride on a reply), and one
	// CQ serves both directions.
	early []vroce.WorkCompletion
	// closing: the next message is the exchange's last. The client tears
	// both connections down once it has the server's, so the server's
	// SEND may be flushed before its ACK comes back: delivered all the
	// same, since the client only disconnects after receiving it.
	closing bool
}

const (
	pfCtlSend = 0
	pfCtlRecv = 64 // each slot holds the largest message, a QP record
)

func newPFControl(dev *vroce.Device, cfg *config) (*pfControl, error) {
	c := &pfControl{cfg: cfg, patience: time.Duration(cfg.Iters)*time.Second + 60*time.Second}
	var err error
	if c.cm, err = cm.New(dev, cm.Config{}); err != nil {
		return nil, err
	}
	fail := func(err error) (*pfControl, error) { c.close(); return nil, err }
	pd, err := dev.AllocPD()
	if err != nil {
		return fail(err)
	}
	if c.cq, err = dev.CreateCQ(16); err != nil {
		return fail(err)
	}
	if c.mr, err = pd.RegMR(make([]byte, 2*pfCtlRecv), vroce.AccessLocalWrite); err != nil {
		return fail(err)
	}
	if c.qp, err = pd.CreateQP(vroce.QPInitAttr{Type: vroce.RC, SendCQ: c.cq, RecvCQ: c.cq,
		Cap: vroce.QPCap{MaxSendWR: 2, MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return fail(err)
	}
	if cfg.Server == "" {
		if c.ln, err = c.cm.Listen(uint16(cfg.Port), 0); err != nil {
			return fail(err)
		}
		fmt.Fprintf(os.Stderr, "vroce-perf: perftest %s server waiting on %v, rdma_cm port %d\n", cfg.Test, dev.LocalAddr(), cfg.Port)
	}
	if err := c.connect(c.qp, cm.Params{MTU: vroce.MTU(cfg.MTU)}); err != nil {
		return fail(err)
	}
	if err := c.postRecv(); err != nil {
		return fail(err)
	}
	c.conn = &pfConn{client: cfg.Server != "", send: c.send, recv: c.recv, cm: true}
	return c, nil
}

// connect connects qp: accepts the next request, or connects to the
// server, trying again while the server has not yet listened for this
// connection (perftest listens anew for the test QP after a sync).
func (c *pfControl) connect(qp *vroce.QP, p cm.Params) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p.Service, p.Access = uint16(c.cfg.Port), vroce.AccessRemoteRead|vroce.AccessRemoteWrite
	var id *cm.ID
	var err error
	if c.ln != nil {
		var req *cm.Request
		if req, err = c.ln.Accept(ctx); err != nil {
			return err
		}
		if id, err = req.Accept(qp, p); err == nil {
			err = id.WaitEstablished(ctx)
		}
	} else {
		to, perr := netip.ParseAddr(c.cfg.Server)
		if perr != nil {
			return fmt.Errorf("perftest -R: server %q: %w", c.cfg.Server, perr)
		}
		for range 50 {
			id, err = c.cm.Connect(ctx, qp, netip.AddrPortFrom(to, 4791), p)
			if !errors.Is(err, syscall.ECONNREFUSED) {
				break
			}
			time.Sleep(100 * time.Millisecond) // perftest's own client waits 100 ms between tries
		}
	}
	if err != nil {
		return fmt.Errorf("perftest -R: %w", err)
	}
	c.ids = append(c.ids, id)
	return nil
}

// connectTest connects the test QP, answering outReads READs at once.
func (c *pfControl) connectTest(qp *vroce.QP, outReads int) error {
	return c.connect(qp, cm.Params{MTU: vroce.MTU(c.cfg.MTU), MaxRdAtomic: outReads})
}

func (c *pfControl) postRecv() error {
	return c.qp.PostRecv(vroce.RecvWR{ID: 1, SGL: []vroce.SGE{c.mr.SGE(pfCtlRecv, pfCtlRecv)}})
}

// send SENDs b and waits for it to complete, as perftest's
// rdma_write_data does.
func (c *pfControl) send(b []byte) error {
	copy(c.mr.Bytes()[pfCtlSend:], b)
	if err := c.qp.PostSend(vroce.SendWR{ID: 2, Opcode: vroce.WRSend, Flags: vroce.SendSignaled, SGL: []vroce.SGE{c.mr.SGE(pfCtlSend, len(b))}}); err != nil {
		return err
	}
	wc, err := c.wait(vroce.WCSend)
	if c.closing && wc.Opcode == vroce.WCSend && wc.Status == vroce.WCWRFlushErr {
		return nil
	}
	return err
}

// recv waits for the peer's next message, of n bytes, and posts the next
// receive.
func (c *pfControl) recv(n int) ([]byte, error) {
	wc, err := c.wait(vroce.WCRecv)
	if err != nil {
		return nil, err
	}
	if int(wc.ByteLen) != n {
		return nil, fmt.Errorf("perftest -R: a %d-byte message where %d were due", wc.ByteLen, n)
	}
	b := append([]byte(nil), c.mr.Bytes()[pfCtlRecv:pfCtlRecv+n]...)
	return b, c.postRecv()
}

func (c *pfControl) wait(op vroce.WCOpcode) (vroce.WorkCompletion, error) {
	for i, wc := range c.early {
		if wc.Opcode == op {
			c.early = append(c.early[:i], c.early[i+1:]...)
			return wc, nil
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.patience)
	defer cancel()
	wc := make([]vroce.WorkCompletion, 1)
	for {
		if _, err := c.cq.PollWait(ctx, wc); err != nil {
			return wc[0], fmt.Errorf("perftest -R: waiting for %v: %w", op, err)
		}
		if wc[0].Status != vroce.WCSuccess {
			return wc[0], fmt.Errorf("perftest -R: %v completed with %v, waiting for %v", wc[0].Opcode, wc[0].Status, op)
		}
		if wc[0].Opcode == op {
			return wc[0], nil
		}
		if len(c.early) > 0 || (wc[0].Opcode != vroce.WCSend && wc[0].Opcode != vroce.WCRecv) {
			return wc[0], fmt.Errorf("perftest -R: %v completed, waiting for %v", wc[0].Opcode, op)
		}
		c.early = append(c.early, wc[0])
	}
}

// close disconnects both connections and lets the manager finish.
func (c *pfControl) close() {
	for i := len(c.ids) - 1; i >= 0; i-- {
		c.ids[i].Disconnect()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c.cm.Drain(ctx)
	if c.ln != nil {
		c.ln.Close()
	}
	c.cm.Close()
}
