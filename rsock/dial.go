package rsock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"reflect"
	"strconv"
	"sync"
	"syscall"
	"time"

	"vroce.dev/vroce"
	"vroce.dev/vroce/cm"
)

// Connection modes.
const (
	// ModeSocket: a TCP connection to the service carries the QP exchange,
	// then closes; a peer that does not speak vRoCE is served over that
	// TCP connection instead (unless fallback is off).
	ModeSocket = "socket"
	// ModeCM: the in-band connection manager; no TCP at all.
	ModeCM = "cm"
)

// probeWait is the least a SOCKET dial waits for a silent probe, and
// strictProbeWait the least one that may not fall back waits.
const (
	probeWait       = 200 * time.Millisecond
	strictProbeWait = 5 * time.Second
)

// DefaultKeepAlive is the idle time before a stream probes its peer.
const DefaultKeepAlive = 15 * time.Second

// ErrNotVRoCE: the peer does not speak vRoCE and fallback is off.
var ErrNotVRoCE = errors.New("rsock: the peer does not speak vRoCE")

// Dialer connects streams, as net.Dialer connects TCP.
type Dialer struct {
	// Timeout and Deadline bound the dial as net.Dialer's do.
	Timeout  time.Duration
	Deadline time.Time
	// KeepAlive is the idle time after which the stream probes the peer
	// (a dead peer then fails reads and writes with ETIMEDOUT); 0 means
	// DefaultKeepAlive, negative turns keepalive off.
	KeepAlive time.Duration
	// Mode is ModeSocket or ModeCM; empty means $RSOCK_MODE, then socket.
	Mode string
	// NoFallback makes a dial to a peer that does not speak vRoCE fail
	// with ErrNotVRoCE instead of carrying on over TCP (as does
	// RSOCK_FALLBACK=0). Such a dial waits longer for a silent service
	// probe (at least 5 s, within its context), since giving up gains it
	// nothing: a peer that never answers fails that late.
	NoFallback bool
	// Provider and ProviderOptions choose the local device's packet I/O,
	// as vroce.Config's do; DeviceAddr is its address ("" for the one
	// the route to the peer leaves from, on any port).
	Provider        string
	ProviderOptions any
	DeviceAddr      string
}

// Dial connects to address on the named network ("tcp", "tcp4" or
// "tcp6") with the zero Dialer.
func Dial(network, address string) (net.Conn, error) {
	return (&Dialer{}).DialContext(context.Background(), network, address)
}

// DialContext is Dial with a context.
func DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	return (&Dialer{}).DialContext(ctx, network, address)
}

// Dial connects to address.
func (d *Dialer) Dial(network, address string) (net.Conn, error) {
	return d.DialContext(context.Background(), network, address)
}

// DialContext connects to address; ctx bounds the whole dial.
func (d *Dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	if err := checkNetwork(network); err != nil {
		return nil, &net.OpError{Op: "dial", Net: network, Err: err}
	}
	if d.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.Timeout)
		defer cancel()
	}
	if !d.Deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.Deadline)
		defer cancel()
	}
	raddr, err := resolve(ctx, network, address)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: network, Err: err}
	}
	mode, err := modeOf(d.Mode)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: network, Addr: tcpAddr(raddr), Err: err}
	}
	var c net.Conn
	if mode == ModeCM {
		c, err = d.dialCM(ctx, network, raddr)
	} else {
		c, err = d.dialSocket(ctx, network, raddr)
	}
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) {
			return nil, err
		}
		// As net does: a dial out of time is a timeout (net.Error), one
		// cancelled is context.Canceled.
		switch {
		case errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded):
			err = os.ErrDeadlineExceeded
		case ctx.Err() != nil:
			err = ctx.Err()
		}
		return nil, &net.OpError{Op: "dial", Net: network, Addr: tcpAddr(raddr), Err: err}
	}
	return c, nil
}

func checkNetwork(network string) error {
	switch network {
	case "tcp", "tcp4", "tcp6":
		return nil
	}
	return net.UnknownNetworkError(network)
}

func modeOf(m string) (string, error) {
	if m == "" {
		m = os.Getenv("RSOCK_MODE")
	}
	switch m {
	case "", ModeSocket:
		return ModeSocket, nil
	case ModeCM:
		return ModeCM, nil
	}
	return "", fmt.Errorf("rsock: mode %q: want %q or %q", m, ModeSocket, ModeCM)
}

func (d *Dialer) keepAlive() time.Duration {
	if d.KeepAlive == 0 {
		return DefaultKeepAlive
	}
	return d.KeepAlive
}

func (d *Dialer) fallback() bool { return !d.NoFallback && os.Getenv("RSOCK_FALLBACK") != "0" }

// resolve turns host:port into one address of the network's family.
func resolve(ctx context.Context, network, address string) (netip.AddrPort, error) {
	host, portStr, err := net.SplitHostPort(address)
	if err != nil {
		return netip.AddrPort{}, err
	}
	port, err := net.DefaultResolver.LookupPort(ctx, "tcp", portStr)
	if err != nil {
		return netip.AddrPort{}, err
	}
	if host == "" {
		host = "127.0.0.1"
		if network == "tcp6" {
			host = "::1"
		}
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		ip = ip.Unmap()
		if (network == "tcp4" && !ip.Is4()) || (network == "tcp6" && !ip.Is6()) {
			return netip.AddrPort{}, &net.AddrError{Err: "address of the wrong family", Addr: host}
		}
		return netip.AddrPortFrom(ip, uint16(port)), nil
	}
	fam := map[string]string{"tcp": "ip", "tcp4": "ip4", "tcp6": "ip6"}[network]
	ips, err := net.DefaultResolver.LookupNetIP(ctx, fam, host)
	if err != nil {
		return netip.AddrPort{}, err
	}
	if len(ips) == 0 {
		return netip.AddrPort{}, &net.DNSError{Err: "no suitable address", Name: host, IsNotFound: true}
	}
	return netip.AddrPortFrom(ips[0].Unmap(), uint16(port)), nil
}

func tcpAddr(a netip.AddrPort) *net.TCPAddr { return net.TCPAddrFromAddrPort(a) }

// The client stacks of this process, one per device configuration, shared
// by every stream dialed from it.
var clients struct {
	mu sync.Mutex
	m  map[stackConfig]*stack
}

// clientStack returns the stack to dial raddr from, with a reference.
func (d *Dialer) clientStack(raddr netip.AddrPort) (*stack, error) {
	cfg := stackConfig{provider: vroce.ProviderName(d.Provider), options: d.ProviderOptions, addr: d.DeviceAddr}
	if cfg.addr == "" {
		addr, err := vroce.DeviceAddrFor(cfg.provider, raddr)
		if err != nil {
			return nil, err
		}
		cfg.addr = addr
	}
	if cfg.options != nil && !reflect.TypeOf(cfg.options).Comparable() {
		// Options that cannot key the table: a stack of the dial's own.
		st, err := openStack(cfg)
		if err != nil {
			return nil, err
		}
		st.refs = 1
		return st, nil
	}
	clients.mu.Lock()
	defer clients.mu.Unlock()
	if st := clients.m[cfg]; st != nil && st.ref() {
		return st, nil
	}
	st, err := openStack(cfg)
	if err != nil {
		return nil, err
	}
	st.refs = 1
	st.onIdle = func() {
		clients.mu.Lock()
		if clients.m[cfg] == st {
			delete(clients.m, cfg)
		}
		clients.mu.Unlock()
	}
	if clients.m == nil {
		clients.m = map[stackConfig]*stack{}
	}
	clients.m[cfg] = st
	return st, nil
}

// probe asks whether a vRoCE service listens at raddr: from a socket of
// its own where the provider allows it (a closed port answers at once),
// else through the stack's device.
func probe(ctx context.Context, st *stack, provider string, raddr netip.AddrPort) cm.ProbeResult {
	var r cm.ProbeResult
	var err error
	if vroce.TraitsOf(provider).ProbesFromASocket {
		r, err = cm.Probe(ctx, raddr, 0)
	} else {
		r, err = st.cm.Probe(ctx, raddr, 0)
	}
	if err != nil {
		return cm.ProbeNoDevice
	}
	return r
}

// dialSocket: probe and TCP connect at once; a vRoCE service gets the QP
// exchange on the TCP connection, anything else gets the connection.
func (d *Dialer) dialSocket(ctx context.Context, network string, raddr netip.AddrPort) (net.Conn, error) {
	st, err := d.clientStack(raddr)
	if err != nil {
		return nil, err
	}
	defer st.unref(false) // the stream takes its own reference
	p := d.startProbe(st, raddr)
	start := time.Now()
	nd := net.Dialer{KeepAlive: d.KeepAlive}
	c, err := nd.DialContext(ctx, network, raddr.String())
	if err != nil {
		p.result()
		return nil, err
	}
	return d.overTCP(ctx, network, st, p, c.(*net.TCPConn), time.Since(start))
}

// DialOver makes a stream of tc, a TCP connection already established to
// a service (one a program connected, handed over: vroce-run's daemon
// does this): a vRoCE service gets the QP exchange on it, and it closes;
// any other keeps tc as the connection (Transport "tcp"), untouched,
// unless fallback is off (ErrNotVRoCE, and tc is closed). The dialer's
// Mode must be socket or empty ($RSOCK_MODE does not apply). The stream
// owns tc from here on: on an error it is closed.
//
// Where the caller can, DialOverConnect is better: here the probe leaves
// only after the connection is accepted, and a listener gives a client
// that has not probed 200 ms to send its exchange before serving it as
// plain TCP.
func (d *Dialer) DialOver(ctx context.Context, tc *net.TCPConn) (net.Conn, error) {
	c, err := d.DialOverConnect(ctx, tc.RemoteAddr().(*net.TCPAddr).AddrPort(), func() (*net.TCPConn, error) { return tc, nil })
	if err != nil {
		tc.Close() // if nothing on the way did
	}
	return c, err
}

// DialOverConnect is DialOver for a connection connect makes to raddr (a
// program's own socket, say; connect is not called if the dial fails
// before it): the stream's device is opened and the probe sent first, so that they go out with the SYN, as Dial's do.
// Opened after the connection was accepted, on a loaded machine (a
// CI run under the race detector), they took the exchange past the
// listener's wait, and the service was handed the exchange as a plain
// TCP client's request.
func (d *Dialer) DialOverConnect(ctx context.Context, raddr netip.AddrPort, connect func() (*net.TCPConn, error)) (net.Conn, error) {
	raddr = netip.AddrPortFrom(raddr.Addr().Unmap(), raddr.Port())
	opErr := func(tc *net.TCPConn, err error) error {
		e := &net.OpError{Op: "dial", Net: "tcp", Addr: net.TCPAddrFromAddrPort(raddr), Err: err}
		if tc != nil {
			e.Source = tc.LocalAddr()
		}
		return e
	}
	if d.Mode != "" && d.Mode != ModeSocket { // $RSOCK_MODE does not apply: the connection is TCP
		return nil, opErr(nil, fmt.Errorf("rsock: a stream over a TCP connection is made in socket mode, not %q", d.Mode))
	}
	st, err := d.clientStack(raddr)
	if err != nil {
		return nil, opErr(nil, err)
	}
	defer st.unref(false)
	p := d.startProbe(st, raddr)
	start := time.Now()
	tc, err := connect()
	if err != nil {
		p.result()
		return nil, err
	}
	c, err := d.overTCP(ctx, "tcp", st, p, tc, time.Since(start))
	if err != nil {
		return nil, opErr(tc, err)
	}
	return c, nil
}

// startProbe probes the service at raddr in the background, or joins
// its probe in flight (probeflight.go).
func (d *Dialer) startProbe(st *stack, raddr netip.AddrPort) *pendingProbe {
	provider := vroce.ProviderName(d.Provider)
	return st.probes.join(raddr, func(ctx context.Context) cm.ProbeResult { return probe(ctx, st, provider, raddr) })
}

// overTCP finishes a SOCKET dial on tc, connected in took: the QP
// exchange on tc if the probe says a vRoCE service listens, else tc
// itself (or ErrNotVRoCE without fallback).
func (d *Dialer) overTCP(ctx context.Context, network string, st *stack, p *pendingProbe, tc *net.TCPConn, took time.Duration) (net.Conn, error) {
	// The probe went out with the SYN; a host with nothing on the UDP
	// port has answered by now (ICMP), a vRoCE service soon will. Give a
	// silent one a few more round trips than the connect took, and a busy
	// host's scheduling delay: falling back on a vRoCE service is safe
	// (it serves the stream over TCP) but slow.
	// A dial that may not fall back gains little by giving up early (a
	// server swamped by dials answers late): it waits longer.
	patience := max(4*took, probeWait)
	if !d.fallback() {
		patience = max(patience, strictProbeWait)
	}
	wait := time.NewTimer(patience)
	defer wait.Stop()
	select {
	case <-p.answered():
	case <-wait.C:
	case <-ctx.Done():
	}
	r := p.result()
	if r != cm.ProbeListening {
		if !d.fallback() {
			tc.Close()
			return nil, fmt.Errorf("%w (probe: %v)", ErrNotVRoCE, r)
		}
		return &TCPConn{TCPConn: tc}, nil
	}
	s, err := st.newStream(d.keepAlive())
	if err != nil {
		tc.Close()
		return nil, err
	}
	err = exchange(ctx, tc, tc, s)
	if err != nil {
		tc.Close()
		s.teardown(false)
		return nil, err
	}
	closeAfterListener(tc)
	return newConn(s, network, tc.LocalAddr(), tc.RemoteAddr()), nil
}

// listenerCloseWait bounds how long a dialer's exchange connection waits
// for the listener to close it first.
const listenerCloseWait = time.Second

// exchangeClosers are the exchange connections waiting for the listener
// to close them (Drain waits for them).
var exchangeClosers sync.WaitGroup

// closeAfterListener closes a finished exchange connection once the
// listener has closed its end, in the background. The end that closes
// first holds the connection's TIME_WAIT for a minute, and only the
// dialer's end holds an ephemeral port: a proxy that dialed 10,000
// streams to one service twice in a minute had nearly every port of the
// range taken by its own TIME_WAITs, each connect() searched the range
// for a free one (75% of its CPU), and dials failed. The listener's
// TIME_WAITs cost it no port.
func closeAfterListener(tc *net.TCPConn) {
	exchangeClosers.Go(func() {
		tc.SetReadDeadline(time.Now().Add(listenerCloseWait))
		io.Copy(io.Discard, tc) // to the listener's FIN, or the wait's end
		tc.Close()
	})
}

// exchange runs the SOCKET exchange for s over c (reading through r) and
// starts the stream, then the ready handshake: each end says when its QP
// is in RTS and waits to hear the same, so that neither sends to a QP
// not yet ready.
func exchange(ctx context.Context, c net.Conn, r io.Reader, s *stream) error {
	rc := readerConn{Conn: c, r: r}
	peer, err := cm.ConnectSocket(ctx, rc, s.qp, qpParams())
	if err != nil {
		return err
	}
	hello, err := parseStreamHello(peer.PrivateData)
	if err != nil {
		return err
	}
	s.start(hello)
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	var b [1]byte
	if _, err := c.Write([]byte{1}); err != nil {
		return err
	}
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return fmt.Errorf("rsock: waiting for the peer's QP: %w", err)
	}
	return nil
}

// readerConn reads through r, which may hold bytes already taken from
// the connection.
type readerConn struct {
	net.Conn
	r io.Reader
}

func (c readerConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// dialCM connects through the connection manager: no TCP.
func (d *Dialer) dialCM(ctx context.Context, network string, raddr netip.AddrPort) (net.Conn, error) {
	st, err := d.clientStack(raddr)
	if err != nil {
		return nil, err
	}
	defer st.unref(false)
	if _, reached := st.recent.Get(raddr, time.Now()); !reached {
		pctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		r := probe(pctx, st, vroce.ProviderName(d.Provider), raddr)
		cancel()
		if r == cm.ProbeNoDevice || r == cm.ProbeNotListening {
			return nil, syscall.ECONNREFUSED
		}
	}
	s, err := st.newStream(d.keepAlive())
	if err != nil {
		return nil, err
	}
	id, err := st.cm.Connect(ctx, s.qp, raddr, qpParams())
	if err != nil {
		st.recent.Delete(raddr) // it failed to answer
		s.teardown(false)
		var rej *cm.RejectError
		if errors.As(err, &rej) {
			return nil, syscall.ECONNREFUSED
		}
		return nil, err
	}
	hello, err := parseStreamHello(id.PrivateData())
	if err != nil {
		s.setID(id)
		s.teardown(false)
		return nil, err
	}
	s.setID(id)
	s.start(hello)
	st.recent.Put(raddr, struct{}{}, time.Now())
	return newConn(s, network, tcpAddr(st.dev.LocalAddr()), tcpAddr(raddr)), nil
}

// newStream creates a QP on the stack and a stream on it, holding a
// reference to the stack until the stream is torn down.
func (s *stack) newStream(keepAlive time.Duration) (*stream, error) {
	if !s.ref() {
		return nil, net.ErrClosed
	}
	qp, err := s.pd.CreateQP(qpAttr(s))
	if err != nil {
		s.unref(false)
		return nil, fmt.Errorf("rsock: %w", err)
	}
	st := newStream(s, qp, keepAlive)
	s.add(st)
	return st, nil
}

func portString(p uint16) string { return strconv.Itoa(int(p)) }

// qpParams shape every stream QP's connection. The local ACK timeout is
// 18 (1.07 s): the QP fails after eight of them without progress, about
// nine seconds, which a busy host's scheduling delays do not reach (two
// seconds did, on two loaded cores under the race detector) and a dead
// peer's keepalive soon does. TCP takes minutes.
func qpParams() cm.Params {
	return cm.Params{Timeout: 18, PrivateData: ourHello().marshal()}
}
