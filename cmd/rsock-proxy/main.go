package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"vroce.dev/internal/nonblock"
	_ "vroce.dev/providers/afxdp" // VROCE_PROVIDER=afxdp VROCE_IFACE=NAME
	"vroce.dev/providers/plugin"  // VROCE_PROVIDER=plugin:NAME
	_ "vroce.dev/providers/udp"   // the default
	"vroce.dev/rsock"
)

// endpoint is one side of the proxy: vroce://HOST:PORT or tcp://HOST:PORT.
type endpoint struct {
	vroce bool
	addr  string
}

func (e endpoint) String() string {
	if e.vroce {
		return "vroce://" + e.addr
	}
	return "tcp://" + e.addr
}

func parseEndpoint(s string) (endpoint, error) {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || (u.Path != "" && u.Path != "/") {
		return endpoint{}, fmt.Errorf("%q: want vroce://HOST:PORT or tcp://HOST:PORT", s)
	}
	if _, _, err := net.SplitHostPort(u.Host); err != nil {
		return endpoint{}, fmt.Errorf("%q: %v", s, err)
	}
	switch u.Scheme {
	case "vroce":
		return endpoint{vroce: true, addr: u.Host}, nil
	case "tcp":
		return endpoint{addr: u.Host}, nil
	}
	return endpoint{}, fmt.Errorf("%q: scheme %q, want vroce or tcp", s, u.Scheme)
}

// config is a proxy's settings.
type config struct {
	listen, to  endpoint
	mode        string        // rsock connection mode
	drain       time.Duration // how long open connections may finish at shutdown
	dialTimeout time.Duration
	noFallback  bool // a vroce:// target is never reached over TCP
	verbose     bool
}

const usage = `rsock-proxy: serve a TCP server over vRoCE, or reach one from TCP clients.

usage: rsock-proxy --listen URL --to URL [flags]

  rsock-proxy --listen vroce://:9000 --to tcp://127.0.0.1:8080
      accepts vRoCE streams (and plain TCP clients) on port 9000 and
      connects each to the TCP server on 127.0.0.1:8080
  rsock-proxy --listen tcp://127.0.0.1:7000 --to vroce://server:9000
      accepts TCP connections on 127.0.0.1:7000 and carries each over a
      vRoCE stream to server:9000

URLs are vroce://HOST:PORT or tcp://HOST:PORT. A vroce:// listener also
uses UDP port PORT (its vRoCE device). Environment: VROCE_PROVIDER (udp,
or afxdp with VROCE_IFACE=NAME), RSOCK_MODE, RSOCK_FALLBACK as for any
rsock program.

flags:
`

func main() {
	flag.CommandLine.Usage = func() {
		fmt.Fprint(flag.CommandLine.Output(), usage)
		flag.PrintDefaults()
	}
	listen := flag.String("listen", "", "where to accept connections: vroce://HOST:PORT or tcp://HOST:PORT")
	to := flag.String("to", "", "where to connect each one: vroce://HOST:PORT or tcp://HOST:PORT")
	var cfg config
	flag.StringVar(&cfg.mode, "mode", "", "rsock connection mode: socket or cm (default $RSOCK_MODE, then socket)")
	flag.DurationVar(&cfg.drain, "drain", 10*time.Second, "at SIGTERM, how long open connections may finish")
	flag.DurationVar(&cfg.dialTimeout, "dial-timeout", 10*time.Second, "how long connecting to the target may take")
	flag.BoolVar(&cfg.noFallback, "no-fallback", false, "fail a connection whose vroce:// target does not speak vRoCE, instead of carrying it over TCP")
	flag.BoolVar(&cfg.verbose, "v", false, "log every connection")
	flag.Parse()
	logger := log.New(os.Stderr, "rsock-proxy: ", log.LstdFlags)
	var err error
	if cfg.listen, err = parseEndpoint(*listen); err == nil {
		cfg.to, err = parseEndpoint(*to)
	}
	if err != nil || flag.NArg() > 0 {
		if err == nil {
			err = fmt.Errorf("unexpected arguments %v", flag.Args())
		}
		fmt.Fprintf(os.Stderr, "rsock-proxy: %v\n\n", err)
		flag.CommandLine.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// Before the log says it listens: a SIGUSR1 sent on seeing that line
	// must not find the runtime ignoring it.
	report := make(chan os.Signal, 1)
	signal.Notify(report, syscall.SIGUSR1)
	p, err := start(cfg, logger)
	if err != nil {
		logger.Fatal(err)
	}
	logger.Printf("listening on %v (%s), forwarding to %v", cfg.listen, p.Addr(), cfg.to)
	for ctx.Err() == nil {
		select {
		case <-report:
			p.report(logger.Writer())
		case <-ctx.Done():
		}
	}
	signal.Stop(report)
	logger.Printf("shutting down: %d connections open, waiting up to %v", p.openCount(), cfg.drain)
	p.shutdown(cfg.drain)
	drainCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	rsock.Drain(drainCtx) // let the last streams' FINs and DREQs finish
	cancel()
	plugin.Cleanup()
	logger.Printf("stopped: %d connections served", p.served.Load())
}

// proxy is a running proxy.
type proxy struct {
	cfg    config
	log    *log.Logger
	ln     net.Listener
	dial   func(ctx context.Context, network, addr string) (net.Conn, error)
	ctx    context.Context // cancelled at the end of shutdown: closes what is left
	cancel context.CancelFunc
	wg     sync.WaitGroup
	served atomic.Int64

	mu    sync.Mutex // guards conns and each one's target
	conns map[*openConn]struct{}
}

// openConn is an accepted connection, from its accept to its close: the
// shutdown counts them and the state report lists them.
type openConn struct {
	client net.Conn
	target net.Conn // nil while it is being dialed
	since  time.Time
}

// openCount is how many accepted connections are not closed yet.
func (p *proxy) openCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// start listens and serves in the background.
func start(cfg config, logger *log.Logger) (*proxy, error) {
	p := &proxy{cfg: cfg, log: logger, conns: map[*openConn]struct{}{}}
	var err error
	if cfg.listen.vroce {
		p.ln, err = (&rsock.ListenConfig{Mode: cfg.mode}).Listen(context.Background(), "tcp", cfg.listen.addr)
	} else {
		p.ln, err = net.Listen("tcp", cfg.listen.addr)
	}
	if err != nil {
		return nil, err
	}
	if cfg.to.vroce {
		p.dial = (&rsock.Dialer{Mode: cfg.mode, NoFallback: cfg.noFallback}).DialContext
	} else {
		p.dial = (&net.Dialer{}).DialContext
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.wg.Go(p.accept)
	return p, nil
}

// Addr is where the proxy listens.
func (p *proxy) Addr() net.Addr { return p.ln.Addr() }

func (p *proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				p.log.Printf("accept: %v", err)
			}
			return
		}
		oc := &openConn{client: c, since: time.Now()}
		p.mu.Lock()
		p.conns[oc] = struct{}{}
		p.mu.Unlock()
		p.wg.Go(func() {
			defer func() {
				p.mu.Lock()
				delete(p.conns, oc)
				p.mu.Unlock()
			}()
			p.serve(oc)
		})
	}
}

// serve connects c to the target and copies both ways until both are
// done, passing half-closes on.
func (p *proxy) serve(oc *openConn) {
	c := oc.client
	defer c.Close()
	ctx, cancel := context.WithTimeout(p.ctx, p.cfg.dialTimeout)
	t, err := p.dial(ctx, "tcp", p.cfg.to.addr)
	cancel()
	if err != nil {
		p.log.Printf("%v: connecting to %v: %v", c.RemoteAddr(), p.cfg.to, err)
		return
	}
	defer t.Close()
	p.served.Add(1)
	p.mu.Lock()
	oc.target = t
	p.mu.Unlock()
	if p.cfg.verbose {
		p.log.Printf("%v (%s) -> %v (%s): open", c.RemoteAddr(), transport(c), t.RemoteAddr(), transport(t))
	}
	stop := context.AfterFunc(p.ctx, func() { c.Close(); t.Close() })
	defer stop()
	var up, down int64
	var wg sync.WaitGroup
	// Each end as the copies see it, made once for both directions.
	cEnd, tEnd := copyEnd(c, t), copyEnd(t, c)
	wg.Go(func() { up = pipe(t, tEnd, cEnd) })
	down = pipe(c, cEnd, tEnd)
	wg.Wait()
	if p.cfg.verbose {
		p.log.Printf("%v -> %v: closed, %d bytes up, %d down", c.RemoteAddr(), t.RemoteAddr(), up, down)
	}
}

// pipe copies from src to dst, dst's end as the copy sees it (copyEnd),
// then half-closes dst so its reader sees the end.
func pipe(dst net.Conn, to io.Writer, from io.Reader) int64 {
	n, _ := io.Copy(to, from)
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	} else {
		dst.Close()
	}
	return n
}

// copyEnd is c as the copies read and write it, across from other. A kernel
// socket across from a vRoCE stream is read and written without the
// runtime's system-call entry (internal/nonblock: it wakes the runtime's
// sleeping monitor thread, on every message of a request-reply
// exchange); the stream's own ReadFrom and WriteTo still copy once. Two
// kernel sockets keep the net package's splice.
func copyEnd(c, other net.Conn) io.ReadWriter {
	if transport(c) == "vroce" || transport(other) != "vroce" {
		return c
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return c
	}
	s, err := nonblock.NewStream(sc)
	if err != nil {
		return c
	}
	return s
}

func transport(c net.Conn) string {
	if t, ok := c.(interface{ Transport() string }); ok {
		return t.Transport()
	}
	return "tcp"
}

// report writes the open connections, oldest first, each with the
// transport state of its vRoCE stream: where a stream stalls, it says
// whether it waits for ACKs (retransmissions, timeouts), for the peer's
// receives (RNR waits) or for the budget towards that peer.
func (p *proxy) report(w io.Writer) {
	p.mu.Lock()
	conns := make([]openConn, 0, len(p.conns))
	for oc := range p.conns {
		conns = append(conns, *oc)
	}
	p.mu.Unlock()
	slices.SortFunc(conns, func(a, b openConn) int { return a.since.Compare(b.since) })
	fmt.Fprintf(w, "%d connections open, %d served\n", len(conns), p.served.Load())
	for _, oc := range conns {
		if oc.target == nil {
			fmt.Fprintf(w, "  %v -> %v, connecting for %v\n", oc.client.RemoteAddr(), p.cfg.to, time.Since(oc.since).Round(time.Millisecond))
			continue
		}
		fmt.Fprintf(w, "  %v -> %v, open %v", oc.client.RemoteAddr(), oc.target.RemoteAddr(), time.Since(oc.since).Round(time.Millisecond))
		for _, c := range []net.Conn{oc.client, oc.target} {
			if s, ok := c.(interface{ Info() rsock.Info }); ok {
				i := s.Info()
				fmt.Fprintf(w, "; vroce %v: rtt %v, window %d, %d bytes in, %d out, %d retransmissions, %d timeouts, %d RNR waits, %d budget stops",
					c.RemoteAddr(), i.RTT, i.CWnd, i.BytesIn, i.BytesOut, i.Retransmits, i.Timeouts, i.RNRWaits, i.PeerBudgetStops)
			}
		}
		fmt.Fprintln(w)
	}
}

// shutdown stops accepting, lets open connections finish for up to
// drain, then closes the rest.
func (p *proxy) shutdown(drain time.Duration) {
	p.ln.Close()
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(drain):
		p.log.Printf("closing %d connections still open", p.openCount())
	}
	p.cancel()
	<-done
}
