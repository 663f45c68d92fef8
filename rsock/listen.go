package rsock

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"os"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"time"

	"vroce.dev/vroce"
	"vroce.dev/vroce/cm"
)

const (
	// detectTimeout is how long a listener waits for a new TCP client's
	// first bytes to tell vRoCE from plain TCP. A vRoCE client sends at
	// once; a plain client of a protocol where the server speaks first
	// waits this long before the server sees it.
	detectTimeout = 200 * time.Millisecond
	// probedDetectTimeout is that wait for a host that probed the
	// service just before: a vRoCE dialer, which sends the exchange only
	// once its probe is answered, and a dialer that may not fall back
	// waits strictProbeWait for that. Ten thousand dials at once through
	// one proxy passed 200 ms, were served as plain TCP clients, and got
	// their own exchange echoed back by the service behind it.
	probedDetectTimeout = strictProbeWait + time.Second
	// handshakeTimeout bounds a vRoCE client's exchange.
	handshakeTimeout = 10 * time.Second
)

// ListenConfig configures a listener, as net.ListenConfig does.
type ListenConfig struct {
	// Backlog bounds the connections waiting for Accept, and is the
	// RDMA_CM listen backlog (max_backlog); 0 means 1,024.
	Backlog int
	// Mode is ModeSocket (a TCP port serving vRoCE clients of both modes
	// and plain TCP clients) or ModeCM (RDMA_CM only: no TCP port);
	// empty means $RSOCK_MODE, then socket.
	Mode string
	// KeepAlive as for Dialer.
	KeepAlive time.Duration
	// Provider, ProviderOptions and DeviceAddr choose the listener's
	// device as Dialer's do; DeviceAddr's port 0 (and the default) means
	// the listening port, which is where dialers look for it.
	Provider        string
	ProviderOptions any
	DeviceAddr      string
}

// Listen announces on the local network address ("tcp", "tcp4", "tcp6").
func Listen(network, address string) (net.Listener, error) {
	return (&ListenConfig{}).Listen(context.Background(), network, address)
}

// Listener accepts streams: vRoCE streams of either mode, and plain TCP
// connections (in socket mode) on the same port.
type Listener struct {
	st      *stack
	network string
	addr    *net.TCPAddr
	tcp     *net.TCPListener // nil in ModeCM
	cml     *cm.Listener
	backlog int // the connection manager's max_backlog
	// listenOnStart: tcp is bound and not listening yet, so that a
	// client that finds the port open is never told that no vRoCE
	// service is there: start listens on it once the service answers
	// probes (Listen's own socket in socket mode, or one handed to Serve).
	listenOnStart bool
	keepAlive     time.Duration
	queue         chan net.Conn
	done          chan struct{}
	ctx           context.Context
	cancel        context.CancelFunc
	wg            sync.WaitGroup
	closeOnce     sync.Once
	// halfOpen holds a token per RDMA_CM connection accepted and not yet
	// established: each has a QP, a stream and a goroutine waiting for
	// the RTU, so at most maxHalfOpen are; further requests wait in the
	// connection manager's backlog, and past it are dropped unanswered
	// (cm.Stats.BacklogDrops) and their senders try again, as rdma_ucm
	// does. A flood of spoofed REQs, which never send an RTU, so holds
	// maxHalfOpen QPs for the handshake timeout, not one per REQ.
	halfOpen chan struct{}
}

// maxHalfOpen bounds a listener's RDMA_CM connections between REQ and
// RTU: the connection manager's default backlog.
const maxHalfOpen = cm.DefaultMaxBacklog

// Listen announces on address.
func (lc *ListenConfig) Listen(ctx context.Context, network, address string) (net.Listener, error) {
	opErr := func(err error) error { return &net.OpError{Op: "listen", Net: network, Err: err} }
	if err := checkNetwork(network); err != nil {
		return nil, opErr(err)
	}
	mode, err := modeOf(lc.Mode)
	if err != nil {
		return nil, opErr(err)
	}
	host, portStr, err := net.SplitHostPort(address)
	if err != nil {
		return nil, opErr(err)
	}
	l := lc.newListener(network)
	if mode == ModeCM {
		l.st, err = listenerStack(lc.stackConfig(host, portStr, l.backlog))
		if err != nil {
			return nil, opErr(err)
		}
		l.addr = tcpAddr(l.st.dev.LocalAddr())
	} else if err := l.listenTCP(ctx, lc, host, portStr); err != nil {
		return nil, opErr(err)
	}
	if err := l.start(); err != nil {
		if l.tcp != nil {
			l.tcp.Close()
		}
		return nil, opErr(err)
	}
	return l, nil
}

// Serve serves vRoCE and plain TCP clients on ln, a TCP listener already
// open (one a program bound and listened on, handed over: vroce-run's
// daemon does this), as Listen in socket mode does on a port of its own:
// the device receives on the UDP port equal to ln's. The listener owns ln
// from here on: closing it closes ln. On an error ln stays the caller's,
// open, to serve plain TCP itself if it likes.
//
// ln may also not be listening yet (a program's socket handed over at
// its listen call), with the system's maximum backlog as net.Listen's:
// Serve listens on a bound one only once the service answers probes, so
// that a client that finds the TCP port open is never told that no vRoCE
// service is there, and on an error leaves it not listening. One with no
// port yet listens first, to be given one, which nobody can know before
// Serve returns.
func (lc *ListenConfig) Serve(ln *net.TCPListener) (net.Listener, error) {
	addr := ln.Addr().(*net.TCPAddr)
	opErr := func(err error) error { return &net.OpError{Op: "listen", Net: "tcp", Addr: addr, Err: err} }
	if lc.Mode != "" && lc.Mode != ModeSocket { // $RSOCK_MODE does not apply: the listener is TCP already
		return nil, opErr(fmt.Errorf("rsock: a TCP listener is served in socket mode, not %q", lc.Mode))
	}
	listening, err := isListening(ln)
	if err != nil {
		return nil, opErr(err)
	}
	if !listening && addr.Port == 0 {
		if err := listenTCPSocket(ln); err != nil {
			return nil, opErr(err)
		}
		if addr, err = boundAddr(ln); err != nil { // ln.Addr() still says port 0
			return nil, opErr(err)
		}
		listening = true
	}
	l := lc.newListener("tcp")
	l.tcp, l.addr = ln, addr
	l.listenOnStart = !listening
	host := addr.IP.String()
	if addr.IP.IsUnspecified() {
		host = "" // every address, as Listen's ":port"
	}
	st, err := listenerStack(lc.stackConfig(host, portString(uint16(addr.Port)), l.backlog))
	if err != nil {
		return nil, opErr(fmt.Errorf("rsock: the device for TCP port %d: %w", addr.Port, err))
	}
	l.st = st
	if err := l.start(); err != nil {
		return nil, opErr(err)
	}
	return l, nil
}

// newListener is a listener not yet serving.
func (lc *ListenConfig) newListener(network string) *Listener {
	backlog := lc.Backlog
	if backlog <= 0 {
		backlog = cm.DefaultMaxBacklog
	}
	return &Listener{network: network, keepAlive: (&Dialer{KeepAlive: lc.KeepAlive}).keepAlive(), backlog: backlog,
		queue: make(chan net.Conn, min(backlog, 4096)), done: make(chan struct{}), halfOpen: make(chan struct{}, maxHalfOpen)}
}

// listenerStack is the stack a listener on c's address serves on, with
// a reference taken: the stack an earlier listener there left behind
// while its streams still run (a program that closes its listener and
// listens again at once, as iperf3 does between tests, would otherwise
// find the UDP port taken), else a new one.
func listenerStack(c stackConfig) (*stack, error) {
	if c.options == nil || reflect.TypeOf(c.options).Comparable() {
		byAddr.Lock()
		old := byAddr.m[c.addr]
		byAddr.Unlock()
		if old != nil && old.cfg == c && old.ref() {
			return old, nil
		}
	}
	st, err := openStack(c)
	if err != nil {
		return nil, err
	}
	st.refs = 1
	return st, nil
}

// start listens on the stack's connection manager, then on the TCP
// socket if that waits for it (listenOnStart), and starts accepting; on
// failure it releases the stack (the TCP listener is its opener's).
func (l *Listener) start() error {
	var err error
	if l.cml, err = l.st.cm.Listen(uint16(l.addr.Port), l.backlog); err != nil {
		l.st.unref(false)
		return err
	}
	if l.listenOnStart {
		if err := listenTCPSocket(l.tcp); err != nil {
			l.cml.Close()
			l.st.unref(false)
			return err
		}
	}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.wg.Add(1)
	go l.acceptCM()
	if l.tcp != nil {
		l.wg.Add(1)
		go l.acceptTCP()
	}
	return nil
}

func (lc *ListenConfig) stackConfig(host, port string, backlog int) stackConfig {
	c := stackConfig{provider: vroce.ProviderName(lc.Provider), options: lc.ProviderOptions, addr: net.JoinHostPort(host, port), backlog: backlog}
	if lc.DeviceAddr != "" {
		c.addr = lc.DeviceAddr
		if h, p, err := net.SplitHostPort(lc.DeviceAddr); err == nil && p == "0" {
			c.addr = net.JoinHostPort(h, port)
		}
	}
	return c
}

// onSocket runs f on ln's socket.
func onSocket(ln *net.TCPListener, f func(fd int) error) error {
	rc, err := ln.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = f(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

// isListening says whether ln's socket listens already.
func isListening(ln *net.TCPListener) (bool, error) {
	var v int
	err := onSocket(ln, func(fd int) (err error) {
		v, err = syscall.GetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_ACCEPTCONN)
		return os.NewSyscallError("getsockopt", err)
	})
	return v != 0, err
}

// listenTCPSocket listens on ln's socket with the largest backlog the
// system allows: the kernel cuts any larger one to net.core.somaxconn,
// which net.Listen uses too.
func listenTCPSocket(ln *net.TCPListener) error {
	return onSocket(ln, func(fd int) error { return os.NewSyscallError("listen", syscall.Listen(fd, math.MaxInt32)) })
}

// boundTCPSocket is a TCP socket bound to host:port and not listening
// yet, as net.Listen binds one: SO_REUSEADDR, and for every address
// (host empty or unspecified) on network "tcp" one IPv6 socket that also
// takes IPv4, or an IPv4 one where the host has no IPv6.
func boundTCPSocket(ctx context.Context, network, host string, port int) (*net.TCPListener, error) {
	var ip netip.Addr
	if host != "" {
		ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip"+strings.TrimPrefix(network, "tcp"), host)
		if err != nil {
			return nil, err
		}
		ip = ips[0]
		for _, a := range ips { // an IPv4 address first, as net.Listen
			if a.Unmap().Is4() {
				ip = a
				break
			}
		}
	}
	type try struct {
		family int
		sa     syscall.Sockaddr
		v6only int // -1: not an IPv6 socket
	}
	var tries []try
	switch {
	case !ip.IsValid() || ip.IsUnspecified():
		if network != "tcp4" {
			only := 0
			if network == "tcp6" {
				only = 1
			}
			tries = append(tries, try{syscall.AF_INET6, &syscall.SockaddrInet6{Port: port}, only})
		}
		if network != "tcp6" {
			tries = append(tries, try{syscall.AF_INET, &syscall.SockaddrInet4{Port: port}, -1})
		}
	case ip.Unmap().Is4():
		tries = append(tries, try{syscall.AF_INET, &syscall.SockaddrInet4{Port: port, Addr: ip.Unmap().As4()}, -1})
	default:
		sa := &syscall.SockaddrInet6{Port: port, Addr: ip.As16()}
		if z := ip.Zone(); z != "" {
			ifi, err := net.InterfaceByName(z)
			if err != nil {
				return nil, err
			}
			sa.ZoneId = uint32(ifi.Index)
		}
		tries = append(tries, try{syscall.AF_INET6, sa, 1})
	}
	var err error
	for _, t := range tries {
		var ln *net.TCPListener
		if ln, err = bindTCP(t.family, t.sa, t.v6only); err == nil || !errors.Is(err, syscall.EAFNOSUPPORT) {
			return ln, err
		}
	}
	return nil, err
}

// bindTCP makes a TCP socket of family bound to sa (with IPV6_V6ONLY set
// to v6only unless it is -1), not listening.
func bindTCP(family int, sa syscall.Sockaddr, v6only int) (*net.TCPListener, error) {
	syscall.ForkLock.RLock()
	fd, err := syscall.Socket(family, syscall.SOCK_STREAM, 0)
	if err == nil {
		syscall.CloseOnExec(fd)
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return nil, os.NewSyscallError("socket", err)
	}
	f := os.NewFile(uintptr(fd), "tcp")
	defer f.Close()
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
		return nil, os.NewSyscallError("setsockopt", err)
	}
	if v6only >= 0 {
		if err := syscall.SetsockoptInt(fd, syscall.IPPROTO_IPV6, syscall.IPV6_V6ONLY, v6only); err != nil {
			return nil, os.NewSyscallError("setsockopt", err)
		}
	}
	if err := syscall.Bind(fd, sa); err != nil {
		return nil, os.NewSyscallError("bind", err)
	}
	ln, err := net.FileListener(f)
	if err != nil {
		return nil, err
	}
	return ln.(*net.TCPListener), nil
}

// boundAddr is the address ln's socket is bound to now.
func boundAddr(ln *net.TCPListener) (*net.TCPAddr, error) {
	var addr *net.TCPAddr
	err := onSocket(ln, func(fd int) error {
		sa, err := syscall.Getsockname(fd)
		switch a := sa.(type) {
		case *syscall.SockaddrInet4:
			addr = &net.TCPAddr{IP: net.IP(a.Addr[:]), Port: a.Port}
		case *syscall.SockaddrInet6:
			addr = &net.TCPAddr{IP: net.IP(a.Addr[:]), Port: a.Port}
			if a.ZoneId != 0 {
				if ifi, ierr := net.InterfaceByIndex(int(a.ZoneId)); ierr == nil {
					addr.Zone = ifi.Name
				}
			}
		case nil:
		default:
			return fmt.Errorf("rsock: a TCP listener bound to %T", sa)
		}
		return os.NewSyscallError("getsockname", err)
	})
	return addr, err
}

// listenTCP opens the device and the TCP port on the same port number:
// the TCP port is bound first (a port another program holds fails here,
// before the device answers anything; one left to the system gets its
// number here), then the device opens on its UDP twin, and the TCP port
// listens only once start has the service answering. When a port left to
// the system finds its UDP twin taken, it tries another.
func (l *Listener) listenTCP(ctx context.Context, lc *ListenConfig, host, portStr string) error {
	port, err := net.DefaultResolver.LookupPort(ctx, l.network, portStr)
	if err != nil {
		return err
	}
	for try := 0; ; try++ {
		ln, err := boundTCPSocket(ctx, l.network, host, port)
		if err != nil {
			return err
		}
		addr := ln.Addr().(*net.TCPAddr) // bound: a port left to the system has its number
		st, err := listenerStack(lc.stackConfig(host, portString(uint16(addr.Port)), l.backlog))
		if err == nil {
			l.st, l.tcp, l.addr, l.listenOnStart = st, ln, addr, true
			return nil
		}
		ln.Close()
		if port != 0 || try == 16 || !errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("rsock: the device for TCP port %d: %w", addr.Port, err)
		}
	}
}

// Addr returns the listener's address.
func (l *Listener) Addr() net.Addr { return l.addr }

// Accept waits for the next stream.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.queue:
		return c, nil
	case <-l.done:
		return nil, &net.OpError{Op: "accept", Net: l.network, Addr: l.addr, Err: net.ErrClosed}
	}
}

// Close stops listening; streams already accepted carry on.
func (l *Listener) Close() error {
	first := false
	l.closeOnce.Do(func() {
		first = true
		close(l.done)
		l.cancel()
		if l.tcp != nil {
			l.tcp.Close()
		}
		l.cml.Close()
		l.wg.Wait()
		for {
			select {
			case c := <-l.queue:
				c.Close()
				continue
			default:
			}
			break
		}
		l.st.unref(false)
	})
	if !first {
		return &net.OpError{Op: "close", Net: l.network, Addr: l.addr, Err: net.ErrClosed}
	}
	return nil
}

// deliver queues an accepted connection, or closes it if the listener
// closed meanwhile.
func (l *Listener) deliver(c net.Conn) {
	select {
	case l.queue <- c:
	case <-l.done:
		c.Close()
	}
}

// acceptTCP serves the TCP port: each connection is told apart and
// handled on its own goroutine, so a slow client delays nobody.
func (l *Listener) acceptTCP() {
	defer l.wg.Done()
	for {
		c, err := l.tcp.AcceptTCP()
		if err != nil {
			select {
			case <-l.done:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(5 * time.Millisecond) // EMFILE and the like: do not spin
			continue
		}
		if l.keepAlive != DefaultKeepAlive {
			// A listener from a socket (boundTCPSocket's, or one handed
			// to Serve) keeps Go's default, 15 s, which is ours: any
			// other asked for is set here, as net.ListenConfig would.
			c.SetKeepAlive(l.keepAlive > 0)
			if l.keepAlive > 0 {
				c.SetKeepAlivePeriod(l.keepAlive)
			}
		}
		l.wg.Add(1)
		go l.handshake(c)
	}
}

// handshake tells a vRoCE client, whose first bytes are the SOCKET
// exchange, from a plain TCP client, and serves each.
func (l *Listener) handshake(c *net.TCPConn) {
	defer l.wg.Done()
	br := bufio.NewReaderSize(c, 64)
	start := time.Now()
	var host netip.Addr
	if ra, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		host = ra.AddrPort().Addr()
	}
	probed := host.IsValid() && l.st.cm.ProbedRecently(host)
	wait := detectTimeout
	if probed {
		wait = probedDetectTimeout
	}
	c.SetReadDeadline(start.Add(wait))
	head, err := br.Peek(len(cm.SocketMagic))
	if err != nil && strings.HasPrefix(cm.SocketMagic, string(head)) && !probed && host.IsValid() && l.st.cm.ProbedRecently(host) {
		// The host's probe came in while we waited: its SYN and its probe
		// leave together, and on a loaded machine the probe can be handled
		// after the connection is accepted (a CI run's first dial of 16
		// was served as a plain TCP client, its exchange arriving later).
		// Wait for it as for any host that probed.
		c.SetReadDeadline(start.Add(probedDetectTimeout))
		head, _ = br.Peek(len(cm.SocketMagic))
	}
	c.SetReadDeadline(time.Time{})
	if string(head) != cm.SocketMagic {
		prefix, _ := br.Peek(br.Buffered())
		l.deliver(&TCPConn{TCPConn: c, prefix: append([]byte(nil), prefix...)})
		return
	}
	s, err := l.st.newStream(l.keepAlive)
	if err != nil {
		c.Close()
		return
	}
	ctx, cancel := context.WithTimeout(l.ctx, handshakeTimeout)
	err = exchange(ctx, c, br, s)
	cancel()
	c.Close()
	if err != nil {
		s.teardown(false)
		return
	}
	l.deliver(newConn(s, l.network, c.LocalAddr(), c.RemoteAddr()))
}

// acceptCM serves RDMA_CM requests: each gets a QP at once, and is
// handed to Accept once the peer's RTU says its QP is ready.
func (l *Listener) acceptCM() {
	defer l.wg.Done()
	for {
		select {
		case l.halfOpen <- struct{}{}:
		case <-l.ctx.Done():
			return
		}
		done := func() { <-l.halfOpen }
		req, err := l.cml.Accept(l.ctx)
		if err != nil {
			done()
			return
		}
		hello, err := parseStreamHello(req.PrivateData)
		if err != nil {
			req.Reject(cm.RejectConsumer, []byte(err.Error()))
			done()
			continue
		}
		s, err := l.st.newStream(l.keepAlive)
		if err != nil {
			req.Reject(cm.RejectNoResources, nil)
			done()
			continue
		}
		s.start(hello)
		id, err := req.Accept(s.qp, qpParams())
		if err != nil {
			s.teardown(false)
			done()
			continue
		}
		s.setID(id)
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			defer done()
			ctx, cancel := context.WithTimeout(l.ctx, handshakeTimeout)
			err := id.WaitEstablished(ctx)
			cancel()
			if err != nil {
				s.teardown(false)
				return
			}
			local := l.st.dev.LocalAddr()
			if local.Addr().IsUnspecified() {
				local = netip.AddrPortFrom(l.addr.AddrPort().Addr(), local.Port())
			}
			l.deliver(newConn(s, l.network, tcpAddr(local), tcpAddr(req.Peer)))
		}()
	}
}
