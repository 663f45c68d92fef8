package preload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"vroce.dev/internal/nonblock"
	"vroce.dev/internal/unixsock"

	"golang.org/x/sys/unix"

	"vroce.dev/rsock"
)

// Config configures a daemon.
type Config struct {
	// Name is the abstract Unix socket the interposer reaches the daemon
	// at (without the leading @).
	Name string
	// Mode is how connections are made: rsock.ModeSocket (default: the
	// program's own TCP connection carries the QP exchange) or
	// rsock.ModeCM (RDMA_CM over the vRoCE device: no TCP to a vRoCE
	// peer at all; the program's socket connects only to one that is not).
	Mode string
	// NoFallback refuses a connection to a peer that does not speak vRoCE
	// (ECONNREFUSED) instead of leaving it on TCP.
	NoFallback bool
	// Ports, when not empty, are the only remote ports (connect) and local
	// ports (listen) taken over; others stay plain TCP.
	Ports []uint16
	// Rules decide further, the first that matches an address (see Rule).
	Rules []Rule
	// Provider and ProviderOptions choose the vRoCE devices (rsock's).
	Provider        string
	ProviderOptions any
	// DialTimeout bounds connecting a program's socket (default 30 s).
	DialTimeout time.Duration
	Log         *slog.Logger
}

// Daemon serves interposed programs: it connects and listens for them and
// bridges their descriptors to rsock streams.
type Daemon struct {
	cfg Config
	ln  *net.UnixListener
	uid int

	stats struct {
		processes, vroceConns, vroceCM, vroceBytes, tcpConns, tcpBytes, resets atomic.Uint64
	}

	// streams are the live vRoCE bridges by ID, for the socket options a
	// program sets or asks of them (SO_LINGER 0, TCP_INFO).
	streams sync.Map // uint32 -> *bridged
	nextID  atomic.Uint32
	// countMu makes a bridge's end (its bytes moving from live to
	// counted) one step for Stats.
	countMu sync.Mutex

	// mu guards users and closed; idle is closed when users falls to
	// zero after it was above it (the daemon then has nobody to serve).
	mu     sync.Mutex
	users  int // control connections, bridges and listeners alive
	served bool
	idle   chan struct{}
	closed bool
}

// Listen opens the daemon's control socket.
func Listen(cfg Config) (*Daemon, error) {
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = 30 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: "@" + cfg.Name, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("vroced: control socket @%s: %w", cfg.Name, err)
	}
	return &Daemon{cfg: cfg, ln: ln, uid: os.Getuid(), idle: make(chan struct{})}, nil
}

// Serve serves until nobody uses the daemon any more (after somebody
// did) or Close.
func (d *Daemon) Serve() error {
	go func() {
		<-d.idle
		d.ln.Close()
	}()
	for {
		c, err := d.ln.AcceptUnix()
		if err != nil {
			d.mu.Lock()
			done := d.closed || d.served && d.users == 0
			d.mu.Unlock()
			if done {
				return nil
			}
			return err
		}
		if !d.acquire() {
			c.Close()
			return nil
		}
		go func() {
			defer d.release()
			defer c.Close()
			d.serveControl(c)
		}()
	}
}

// Close stops accepting new clients.
func (d *Daemon) Close() error {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	return d.ln.Close()
}

// Stats are the daemon's counters: vRoCE bytes are those of the bridges
// that ended and what the live ones have carried so far.
func (d *Daemon) Stats() Stats {
	d.countMu.Lock()
	defer d.countMu.Unlock()
	var live uint64
	d.streams.Range(func(_, b any) bool {
		live += b.(*bridged).liveBytes()
		return true
	})
	return Stats{Processes: d.stats.processes.Load(), VRoCEConns: d.stats.vroceConns.Load(), VRoCECM: d.stats.vroceCM.Load(), Resets: d.stats.resets.Load(), VRoCEBytes: d.stats.vroceBytes.Load() + live,
		TCPConns: d.stats.tcpConns.Load(), TCPBytes: d.stats.tcpBytes.Load()}
}

func (d *Daemon) acquire() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed || d.served && d.users == 0 {
		return false
	}
	d.users++
	d.served = true
	return true
}

func (d *Daemon) release() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.users--
	if d.users == 0 && !d.closed {
		close(d.idle)
		d.closed = true
	}
}

// serveControl answers one process's requests, one at a time.
func (d *Daemon) serveControl(c *net.UnixConn) {
	if err := d.checkPeer(c); err != nil {
		d.cfg.Log.Warn("vroced: refused a client", "err", err)
		return
	}
	buf := make([]byte, messageSize+1)
	oob := make([]byte, unix.CmsgSpace(4*2))
	sess := &session{pending: map[uint32]*pendingConnect{}}
	for {
		n, oobn, flags, _, err := c.ReadMsgUnix(buf, oob)
		if err != nil || n == 0 {
			return
		}
		fds, _ := unixsock.Rights(oob[:oobn]) // a malformed rest is refused by the count check
		m, err := decodeRequest(buf[:n])
		if err == nil && flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
			err = fmt.Errorf("%w: truncated", errBadMessage)
		}
		if err != nil {
			unixsock.CloseAll(fds...)
			d.cfg.Log.Warn("vroced: dropping a client", "err", err)
			return
		}
		reply, give, extra := d.handle(m, fds, sess)
		if m.op == opHello {
			continue
		}
		out := reply.encode()
		out = append(out, extra...)
		var rights []byte
		if give >= 0 {
			rights = unix.UnixRights(give)
		}
		_, _, err = c.WriteMsgUnix(out, rights, nil)
		if give >= 0 {
			unix.Close(give)
		}
		if err != nil {
			return
		}
	}
}

// checkPeer admits only processes of the daemon's own user.
func (d *Daemon) checkPeer(c *net.UnixConn) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	var credErr error
	if err := rc.Control(func(fd uintptr) { cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return err
	}
	if credErr != nil {
		return credErr
	}
	if int(cred.Uid) != d.uid {
		return fmt.Errorf("uid %d (pid %d) is not the daemon's uid %d", cred.Uid, cred.Pid, d.uid)
	}
	return nil
}

// handle answers one request: the reply, a descriptor to pass with it
// (-1: none) and bytes that follow the reply.
func (d *Daemon) handle(m message, fds []int, s *session) (message, int, []byte) {
	reply := message{op: m.op}
	need := 0 // descriptors the request must carry
	if m.op == opConnect || m.op == opListen {
		need = 1
	}
	if len(fds) != need {
		unixsock.CloseAll(fds...)
		reply.errno = int32(unix.EINVAL)
		return reply, -1, nil
	}
	switch m.op {
	case opHello:
		d.stats.processes.Add(1)
	case opStats:
		return reply, -1, d.Stats().encode()
	case opConnect:
		if m.flags&flagAsync != 0 {
			return d.connectAsync(fds[0], m.peer, s)
		}
		return d.connect(fds[0], m.peer)
	case opResult:
		return d.result(m.flags, s), -1, nil
	case opLinger0:
		b, ok := d.streams.Load(m.flags)
		if !ok {
			reply.errno = int32(unix.ENOTCONN)
			return reply, -1, nil
		}
		b.(*bridged).setLinger0()
	case opInfo:
		b, ok := d.streams.Load(m.flags)
		if !ok {
			reply.errno = int32(unix.ENOTCONN)
			return reply, -1, nil
		}
		c, ok := b.(*bridged).conn.(interface{ Info() rsock.Info })
		if !ok {
			reply.errno = int32(unix.EOPNOTSUPP)
			return reply, -1, nil
		}
		return reply, -1, encodeInfo(c.Info())
	case opListen:
		return d.listen(fds[0])
	}
	return reply, -1, nil
}

// takes says whether connections to (connect) or on (listen) a are
// the daemon's to carry over vRoCE: its port among Ports when those are
// given, and the rules' say.
func (d *Daemon) takes(a netip.AddrPort) bool {
	if len(d.cfg.Ports) > 0 && !slices.Contains(d.cfg.Ports, a.Port()) {
		return false
	}
	return decide(d.cfg.Rules, a)
}

// connect connects the program's socket fd to peer and dials vRoCE over
// it: a vRoCE stream comes back as a socketpair end to swap in, any other
// peer leaves the program its socket, connected.
func (d *Daemon) connect(fd int, peer netip.AddrPort) (message, int, []byte) {
	reply := message{op: opConnect}
	defer unix.Close(fd)
	conn, err := d.dial(fd, peer)
	if err != nil {
		reply.errno = int32(errnoOf(err))
		return reply, -1, nil
	}
	if conn == nil {
		return reply, -1, nil // connected over TCP: the program keeps its socket
	}
	give, id, err := d.bridge(conn)
	if err != nil {
		conn.Close()
		reply.errno = int32(errnoOf(err))
		return reply, -1, nil
	}
	reply.flags = flagSwap | id<<8
	reply.local, reply.peer = addrOf(conn.LocalAddr()), addrOf(conn.RemoteAddr())
	return reply, give, nil
}

// session is one process's control connection: its non-blocking
// connects in progress, by the ID the interposer holds.
type session struct {
	mu      sync.Mutex // the connects' goroutines drop their own entries
	pending map[uint32]*pendingConnect
}

// newID names a bridge (or a connect that will become one): 24 bits, as
// they travel in a reply's flags.
func (d *Daemon) newID() uint32 { return d.nextID.Add(1) & 0xffffff }

// pendingConnect is a non-blocking connect in progress.
type pendingConnect struct {
	done   chan struct{}
	result message // errno, local, peer: set before done closes
}

// connectAsync starts connecting fd to peer for a program whose socket
// is non-blocking, and returns at once a socketpair end for it to swap
// in: whatever the program writes there waits in it until the
// connection is up. The program learns the outcome (SO_ERROR) with
// opResult. A peer that is not vRoCE is bridged too here: the program
// holds the placeholder already.
func (d *Daemon) connectAsync(fd int, peer netip.AddrPort, s *session) (message, int, []byte) {
	reply := message{op: opConnect}
	ours, theirs, err := bridgePair()
	if err != nil || !d.acquire() {
		if err == nil {
			ours.Close()
			unix.Close(theirs)
			err = unix.ESHUTDOWN
		}
		unix.Close(fd)
		reply.errno = int32(errnoOf(err))
		return reply, -1, nil
	}
	p := &pendingConnect{done: make(chan struct{}), result: message{op: opResult}}
	id := d.newID()
	s.mu.Lock()
	s.pending[id] = p
	s.mu.Unlock()
	go func() {
		defer d.release()
		defer unix.Close(fd)
		conn, err := d.dial(fd, peer)
		if err == nil && conn == nil {
			// Not vRoCE (dial counted it): the program's own TCP
			// connection, bridged.
			conn, err = tcpConnOf(fd)
		}
		if err != nil {
			p.result.errno = int32(errnoOf(err))
			ours.Close()
			close(p.done)
			return
		}
		p.result.local, p.result.peer = addrOf(conn.LocalAddr()), addrOf(conn.RemoteAddr())
		b := &bridged{d: d, id: id, conn: conn, count: &d.stats.tcpBytes, resets: &d.stats.resets}
		if transport(conn) == "vroce" {
			d.stats.vroceConns.Add(1)
			b.count = &d.stats.vroceBytes
			d.streams.Store(id, b) // run deletes it
		}
		close(p.done) // the outcome is known; the bridge runs on
		b.run(ours)
		// The program has closed its end: it can no longer ask. (A failed
		// connect's entry stays until asked or the process goes: the
		// errno is what SO_ERROR must give.)
		s.mu.Lock()
		delete(s.pending, id)
		s.mu.Unlock()
	}()
	reply.flags = flagSwap | id<<8
	return reply, theirs, nil
}

// result waits for a non-blocking connect's outcome.
func (d *Daemon) result(id uint32, s *session) message {
	s.mu.Lock()
	p := s.pending[id]
	delete(s.pending, id)
	s.mu.Unlock()
	if p == nil {
		// Only a connect that succeeded and whose bridge has ended is
		// dropped unasked (see connectAsync).
		return message{op: opResult}
	}
	<-p.done
	return p.result
}

// dial connects fd to peer as the mode says and returns the vRoCE
// stream, or nil when the peer is plain TCP and fd is connected to it.
func (d *Daemon) dial(fd int, peer netip.AddrPort) (net.Conn, error) {
	if d.cfg.Mode == rsock.ModeCM && d.takes(peer) {
		ctx, cancel := context.WithTimeout(context.Background(), d.cfg.DialTimeout)
		defer cancel()
		dialer := rsock.Dialer{Mode: rsock.ModeCM, Provider: d.cfg.Provider, ProviderOptions: d.cfg.ProviderOptions, NoFallback: true}
		conn, err := dialer.DialContext(ctx, "tcp", peer.String())
		if err == nil {
			d.stats.vroceCM.Add(1)
			return conn, nil
		}
		if d.cfg.NoFallback {
			return nil, err
		}
		// No vRoCE service answered there (refused, not vRoCE, silent):
		// the program's own socket tries TCP, which has the last word
		// (a closed port refuses it too).
		if err := connectSocket(fd, peer, d.cfg.DialTimeout); err != nil {
			return nil, err
		}
		d.stats.tcpConns.Add(1)
		return nil, nil
	}
	if !d.takes(peer) {
		if err := connectSocket(fd, peer, d.cfg.DialTimeout); err != nil {
			return nil, err
		}
		d.stats.tcpConns.Add(1)
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), d.cfg.DialTimeout)
	defer cancel()
	dialer := rsock.Dialer{Provider: d.cfg.Provider, ProviderOptions: d.cfg.ProviderOptions, NoFallback: d.cfg.NoFallback}
	conn, err := dialer.DialOverConnect(ctx, peer, func() (*net.TCPConn, error) {
		if err := connectSocket(fd, peer, d.cfg.DialTimeout); err != nil {
			return nil, err
		}
		return tcpConnOf(fd)
	})
	if err != nil {
		if errors.Is(err, rsock.ErrNotVRoCE) {
			return nil, unix.ECONNREFUSED
		}
		return nil, err
	}
	if transport(conn) != "vroce" {
		conn.Close() // our copy; the program's socket stays as it is
		d.stats.tcpConns.Add(1)
		return nil, nil
	}
	return conn, nil
}

// listen serves fd, the socket the program calls listen on, with rsock
// and returns the accept queue's other end. rsock listens on it only once
// its vRoCE service answers probes (ListenConfig.Serve), so a client that
// finds the port open (one that polls for it, say) is not sent to TCP. A
// socket the daemon does not take is left to the program to listen on.
func (d *Daemon) listen(fd int) (message, int, []byte) {
	reply := message{op: opListen}
	f := os.NewFile(uintptr(fd), "program-listener")
	l, err := net.FileListener(f)
	f.Close()
	if err != nil {
		reply.errno = int32(errnoOf(err))
		return reply, -1, nil
	}
	tl, ok := l.(*net.TCPListener)
	local := addrOf(l.Addr())
	if !ok || !d.takes(local) {
		l.Close()
		reply.errno = int32(unix.EPROTONOSUPPORT) // the program keeps its own listener
		return reply, -1, nil
	}
	lc := rsock.ListenConfig{Provider: d.cfg.Provider, ProviderOptions: d.cfg.ProviderOptions}
	rl, err := lc.Serve(tl)
	if err != nil {
		tl.Close()
		reply.errno = int32(errnoOf(err))
		return reply, -1, nil
	}
	ours, theirs, err := unixsock.Pair(unix.SOCK_SEQPACKET)
	if err != nil {
		rl.Close()
		reply.errno = int32(errnoOf(err))
		return reply, -1, nil
	}
	if !d.acquire() {
		rl.Close()
		ours.Close()
		unix.Close(theirs)
		reply.errno = int32(unix.ESHUTDOWN)
		return reply, -1, nil
	}
	go func() {
		defer d.release()
		d.serveAcceptQueue(rl, ours)
	}()
	reply.flags, reply.local = flagSwap, addrOf(rl.Addr()) // an unbound socket's port is Serve's to give
	return reply, theirs, nil
}

// serveAcceptQueue passes each accepted connection to the program until
// it closes its listener (the queue hangs up) or the listener fails.
func (d *Daemon) serveAcceptQueue(rl net.Listener, q *net.UnixConn) {
	go func() {
		var b [1]byte
		q.Read(b[:]) // returns when the program closes (or shuts) its end
		// The TCP listener first, then the queue: the interposer waits
		// for the queue to hang up before its close returns, so that a
		// program that listens again on the port at once (iperf3 does
		// between tests) finds it free.
		rl.Close()
		q.Close()
	}()
	defer q.Close()
	defer rl.Close()
	for {
		c, err := rl.Accept()
		if err != nil {
			return
		}
		if err := d.pass(c, q); err != nil {
			c.Close()
			return
		}
	}
}

// pass gives the program one accepted connection: the real socket of a
// plain TCP client whose bytes the listener has not read, else a bridge.
func (d *Daemon) pass(c net.Conn, q *net.UnixConn) error {
	local, peer := addrOf(c.LocalAddr()), addrOf(c.RemoteAddr())
	if tc, ok := c.(*rsock.TCPConn); ok && tc.Buffered() == 0 {
		d.stats.tcpConns.Add(1)
		rc, err := tc.TCPConn.SyscallConn()
		if err != nil {
			return err
		}
		var sendErr error
		if err := rc.Control(func(fd uintptr) {
			_, _, sendErr = q.WriteMsgUnix(encodeAccept(0, local, peer), unix.UnixRights(int(fd)), nil)
		}); err != nil {
			return err
		}
		c.Close()
		return sendErr
	}
	give, id, err := d.bridge(c)
	if err != nil {
		return err
	}
	defer unix.Close(give)
	_, _, err = q.WriteMsgUnix(encodeAccept(flagSwap|id<<8, local, peer), unix.UnixRights(give), nil)
	return err
}

// bridge copies between c and one end of a new socketpair and returns
// the other end for the program, and the bridge's ID.
func (d *Daemon) bridge(c net.Conn) (int, uint32, error) {
	ours, theirs, err := bridgePair()
	if err != nil {
		return -1, 0, err
	}
	if !d.acquire() {
		ours.Close()
		unix.Close(theirs)
		return -1, 0, unix.ESHUTDOWN
	}
	id := d.newID()
	b := &bridged{d: d, id: id, conn: c, count: &d.stats.tcpBytes, resets: &d.stats.resets}
	if transport(c) == "vroce" {
		d.stats.vroceConns.Add(1)
		b.count = &d.stats.vroceBytes
		d.streams.Store(id, b)
	} else {
		d.stats.tcpConns.Add(1)
	}
	go func() {
		defer d.release()
		b.run(ours) // deletes b from streams
	}()
	return theirs, id, nil
}

// bridged is a connection bridged to a program's socketpair end.
type bridged struct {
	d     *Daemon
	id    uint32
	conn  net.Conn
	count *atomic.Uint64
	// reset: the program set SO_LINGER 0, so its close resets the
	// stream instead of finishing it.
	reset atomic.Bool
	// resets counts streams the peer reset. The program sees the end
	// of its socketpair as EOF: a socketpair cannot carry a reset.
	resets *atomic.Uint64
}

func (b *bridged) run(u *bridgeEnd) {
	info, ok := b.conn.(interface{ Info() rsock.Info })
	if !ok {
		copyBoth(b.conn, u, b.count, &b.reset, func() { b.resets.Add(1) })
		return
	}
	copyBoth(b.conn, u, nil, &b.reset, func() { b.resets.Add(1) })
	i := info.Info()
	b.d.countMu.Lock() // Stats sees these bytes live or counted, once
	b.d.streams.Delete(b.id)
	b.count.Add(i.BytesIn + i.BytesOut)
	b.d.countMu.Unlock()
}

// liveBytes is what a live vRoCE bridge has carried so far.
func (b *bridged) liveBytes() uint64 {
	if info, ok := b.conn.(interface{ Info() rsock.Info }); ok {
		i := info.Info()
		return i.BytesIn + i.BytesOut
	}
	return 0
}

// setLinger0 makes the program's close reset the stream.
func (b *bridged) setLinger0() {
	b.reset.Store(true)
	if l, ok := b.conn.(interface{ SetLinger(int) error }); ok {
		l.SetLinger(0)
	}
}

// copyBoth copies each way until both ends are done, passing a half
// close on; an error either way closes both. A vRoCE stream keeps its
// ReadFrom and WriteTo (one copy each way, and writev to the socketpair)
// and counts its own bytes (rsock.Conn.Info); anything else is counted
// here, into count, as bytes pass.
func copyBoth(c net.Conn, u *bridgeEnd, count *atomic.Uint64, reset *atomic.Bool, peerReset func()) {
	var wg sync.WaitGroup
	var once sync.Once
	closeBoth := func() { once.Do(func() { c.Close(); u.Close() }) }
	var from io.Reader = u
	var to io.Writer = u
	if count != nil {
		from, to = counting{u, count}, counting{u, count}
	}
	half := func(copy func() error, dst any) {
		defer wg.Done()
		if copy() != nil {
			closeBoth()
			return
		}
		if cw, ok := dst.(interface{ CloseWrite() error }); ok && cw.CloseWrite() != nil {
			closeBoth()
		}
	}
	// One direction on a goroutine of its own, the other on the caller's:
	// two goroutines a bridge.
	wg.Add(2)
	go half(func() error {
		_, err := io.Copy(c, from)
		if err == nil && reset.Load() {
			closeBoth() // the program closed with SO_LINGER 0: a reset, not a FIN
		}
		return err
	}, c)
	half(func() error {
		_, err := io.Copy(to, c)
		if errors.Is(err, syscall.ECONNRESET) {
			peerReset()
		}
		return err
	}, u)
	wg.Wait()
	closeBoth()
}

// counting counts what is read from or written to the program's end.
type counting struct {
	rw io.ReadWriter
	n  *atomic.Uint64
}

func (c counting) Read(b []byte) (int, error) {
	n, err := c.rw.Read(b)
	c.n.Add(uint64(n))
	return n, err
}

func (c counting) Write(b []byte) (int, error) {
	n, err := c.rw.Write(b)
	c.n.Add(uint64(n))
	return n, err
}

func transport(c net.Conn) string {
	if t, ok := c.(interface{ Transport() string }); ok {
		return t.Transport()
	}
	return "tcp"
}

// connectSocket connects the program's socket, which may be blocking or
// not (a flag its descriptor shares with ours: the interposer puts its
// own back after), without holding a thread past timeout.
func connectSocket(fd int, peer netip.AddrPort, timeout time.Duration) error {
	if err := unix.SetNonblock(fd, true); err != nil {
		return err
	}
	err := unix.Connect(fd, sockaddr(peer))
	if err == nil {
		return nil
	}
	if err != unix.EINPROGRESS && err != unix.EINTR {
		return err
	}
	deadline := time.Now().Add(timeout)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return unix.ETIMEDOUT
		}
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
		n, err := unix.Poll(pfd, int(left.Milliseconds())+1)
		if err == unix.EINTR || n == 0 {
			continue
		}
		if err != nil {
			return err
		}
		soErr, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
		if err != nil {
			return err
		}
		if soErr != 0 {
			return syscall.Errno(soErr)
		}
		return nil
	}
}

// tcpConnOf makes a *net.TCPConn of a copy of fd.
func tcpConnOf(fd int) (*net.TCPConn, error) {
	dup, err := unix.Dup(fd)
	if err != nil {
		return nil, err
	}
	return unixsock.FileConn[*net.TCPConn](dup)
}

func sockaddr(a netip.AddrPort) unix.Sockaddr {
	ip := a.Addr()
	if ip.Is4() || ip.Is4In6() {
		return &unix.SockaddrInet4{Port: int(a.Port()), Addr: ip.Unmap().As4()}
	}
	sa := &unix.SockaddrInet6{Port: int(a.Port()), Addr: ip.As16()}
	return sa
}

func addrOf(a net.Addr) netip.AddrPort {
	if t, ok := a.(*net.TCPAddr); ok {
		return t.AddrPort()
	}
	if ap, err := netip.ParseAddrPort(a.String()); err == nil {
		return ap
	}
	return netip.AddrPort{}
}

// bridgeBuffer sizes a bridge's socket buffers: the default (about 200
// KiB) holds a stream to a fraction of what it carries between hosts.
const bridgeBuffer = 4 << 20

// bridgeEnd is the daemon's end of a bridge's stream socketpair: read
// and written without the runtime's system-call entry (nonblock.Stream;
// it wakes the runtime's sleeping monitor thread on every message of a
// request-reply exchange), and made without what net.FileConn costs a
// connection (a dup, its address and type queried, the original
// closed): a pollable *os.File of the descriptor itself.
type bridgeEnd struct {
	f *os.File
	*nonblock.Stream
}

// bridgePair makes a bridge's socketpair: our end, and the program's as a
// descriptor (blocking, as a program's sockets start).
func bridgePair() (*bridgeEnd, int, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, -1, fmt.Errorf("socketpair: %w", err)
	}
	// A stream socketpair's queue is charged to its sender (the
	// receiver's SO_RCVBUF plays no part): both ends send.
	for _, fd := range fds {
		// Forced where allowed (CAP_NET_ADMIN), else up to the system's cap.
		if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, bridgeBuffer) != nil {
			unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, bridgeBuffer)
		}
	}
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, -1, err
	}
	// Non-blocking, so os.NewFile registers it with the runtime's poller.
	f := os.NewFile(uintptr(fds[0]), "vroced-bridge")
	s, err := nonblock.NewStream(f)
	if err != nil {
		f.Close()
		unix.Close(fds[1])
		return nil, -1, err
	}
	return &bridgeEnd{f: f, Stream: s}, fds[1], nil
}

// CloseWrite ends what the daemon sends the program: its reads see EOF.
func (e *bridgeEnd) CloseWrite() error {
	rc, err := e.f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.Shutdown(int(fd), unix.SHUT_WR) }); err != nil {
		return err
	}
	return serr
}

// Close closes our end; a Read or Write in progress returns.
func (e *bridgeEnd) Close() error { return e.f.Close() }

// errnoOf is the errno to give the program for err.
func errnoOf(err error) syscall.Errno {
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return unix.ETIMEDOUT
	}
	return unix.ECONNREFUSED
}
