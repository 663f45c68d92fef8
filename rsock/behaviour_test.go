package rsock

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vroce.dev/providers/sim"
)

func listen(t *testing.T, lc *ListenConfig, addr string) net.Listener {
	t.Helper()
	l, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// payload is n reproducible random bytes.
func payload(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for k := range 8 {
			b[i+k] = byte(v >> (8 * k))
		}
	}
	return b
}

// echoServer echoes every accepted stream until its peer half-closes.
func echoServer(t testing.TB, l net.Listener) *sync.WaitGroup {
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				if _, err := io.Copy(c, c); err != nil {
					// A client's failure often starts here: say what the
					// server's end saw (shown with -v or when the test fails).
					t.Logf("echo server: %v", err)
				}
				c.(interface{ CloseWrite() error }).CloseWrite()
			})
		}
	})
	return &wg
}

// roundTrip sends data through an echo stream and checks it comes back.
func roundTrip(c net.Conn, data []byte) error {
	errc := make(chan error, 1)
	go func() {
		_, err := c.Write(data)
		if err == nil {
			err = c.(interface{ CloseWrite() error }).CloseWrite()
		}
		errc <- err
	}()
	h := sha256.New()
	n, err := io.Copy(h, c)
	if werr := <-errc; werr != nil {
		return fmt.Errorf("write: %w", werr)
	}
	if err != nil {
		return fmt.Errorf("read: %w", err)
	}
	if want := sha256.Sum256(data); n != int64(len(data)) || !bytes.Equal(h.Sum(nil), want[:]) {
		return fmt.Errorf("echoed %d bytes, sent %d, or they differ", n, len(data))
	}
	return nil
}

// TestManyConcurrentStreamsVerified: many streams, both directions at
// once, every byte checked, in both modes.
func TestManyConcurrentStreamsVerified(t *testing.T) {
	for _, mode := range []string{ModeSocket, ModeCM} {
		t.Run(mode, func(t *testing.T) {
			l := listen(t, &ListenConfig{Mode: mode}, "127.0.0.1:0")
			served := echoServer(t, l)
			var wg sync.WaitGroup
			for i := range 12 {
				wg.Go(func() {
					c, err := (&Dialer{Mode: mode}).Dial("tcp", l.Addr().String())
					if err != nil {
						t.Error(err)
						return
					}
					defer c.Close()
					if transport(c) != "vroce" {
						t.Errorf("transport %s", transport(c))
					}
					if err := roundTrip(c, payload(uint64(i), 512<<10+i*4099)); err != nil {
						t.Errorf("stream %d: %v", i, err)
						if vc, ok := c.(*Conn); ok {
							t.Logf("client QP %+v", vc.s.qp.Stats())
						}
					}
				})
			}
			wg.Wait()
			l.Close()
			served.Wait()
			settle(t)
		})
	}
}

// TestSlowReaderDoesNotHoldUpOthers: one stream whose reader never reads
// fills its credits and stops, while other streams of the same devices
// move megabytes.
func TestSlowReaderDoesNotHoldUpOthers(t *testing.T) {
	l := listen(t, &ListenConfig{}, "127.0.0.1:0")
	stalled, stalledServer := pair(t, l, &Dialer{})
	// Fill the stalled stream: its writer blocks once the credits and the
	// pending buffer are full.
	wrote := make(chan int, 1)
	go func() {
		stalled.SetWriteDeadline(time.Now().Add(time.Hour))
		n, _ := stalled.Write(make([]byte, 64<<20))
		wrote <- n
	}()
	served := echoServer(t, l)
	for i := range 4 {
		c, err := Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if err := roundTrip(c, payload(uint64(i), 2<<20)); err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	stalled.SetWriteDeadline(time.Now()) // interrupt the blocked writer
	n := <-wrote
	if n <= 0 || n > (window+1)*bufSize {
		t.Fatalf("the stalled stream took %d bytes: more than its credits and one buffer", n)
	}
	// What it took arrives whole once the reader reads.
	got := make([]byte, n)
	if _, err := io.ReadFull(stalledServer, got); err != nil {
		t.Fatal(err)
	}
	stalled.Close()
	stalledServer.Close()
	l.Close()
	served.Wait()
	settle(t)
}

// TestWriteDeadlineEndsAWriterWaitingForCredits: a writer whose peer
// stops reading waits for credits receiving for the device (the credit
// that last woke it hands it the receive turn), where no packet comes to
// wake it; a deadline set meanwhile passing ends the write, with what the
// credits let through taken and delivered.
func TestWriteDeadlineEndsAWriterWaitingForCredits(t *testing.T) {
	l := listen(t, &ListenConfig{}, "127.0.0.1:0")
	c, srv := pair(t, l, &Dialer{})
	type outcome struct {
		n   int
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		n, err := c.Write(make([]byte, 64<<20))
		done <- outcome{n, err}
	}()
	// Read half a window, so that a credit wakes the writer, then stop.
	// The deadline is set only then, with the writer surely under way. Set
	// before the write, at 300 ms, this read once waited for ever in a
	// hunt under the race detector with the whole suite running: most
	// likely the deadline passed before the writer had sent half a window
	// (this machine's hypervisor takes its vCPUs for tens of ms at times).
	read := window / 2 * bufSize
	srv.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := io.ReadFull(srv, make([]byte, read))
	require.NoError(t, err, "half a window did not arrive")
	srv.SetReadDeadline(time.Time{})
	c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	var o outcome
	select {
	case o = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the write deadline passed and the writer waiting for credits did not return")
	}
	require.ErrorIs(t, o.err, os.ErrDeadlineExceeded)
	require.Greater(t, o.n, read)
	require.LessOrEqual(t, o.n, read+(window+1)*bufSize)
	_, err = io.ReadFull(srv, make([]byte, o.n-read))
	require.NoError(t, err)
	c.Close()
	srv.Close()
	l.Close()
	settle(t)
}

// TestCloseInEveryOrder: half-closes and closes from each side, in each
// order; the data written before always arrives, then EOF.
func TestCloseInEveryOrder(t *testing.T) {
	l := listen(t, &ListenConfig{}, "127.0.0.1:0")
	type step func(a, b net.Conn) error
	cw := func(c net.Conn) error { return c.(interface{ CloseWrite() error }).CloseWrite() }
	expectEOF := func(c net.Conn, want string) error {
		got, err := io.ReadAll(c)
		if err != nil || string(got) != want {
			return fmt.Errorf("read %q, %v; want %q then EOF", got, err, want)
		}
		return nil
	}
	cases := map[string]step{
		"client half-closes, server answers and closes": func(a, b net.Conn) error {
			a.Write([]byte("request"))
			cw(a)
			if err := expectEOF(b, "request"); err != nil {
				return err
			}
			b.Write([]byte("response"))
			b.Close()
			return expectEOF(a, "response")
		},
		"both half-close at once": func(a, b net.Conn) error {
			a.Write([]byte("a"))
			b.Write([]byte("b"))
			cw(a)
			cw(b)
			if err := expectEOF(a, "b"); err != nil {
				return err
			}
			return expectEOF(b, "a")
		},
		"server closes first": func(a, b net.Conn) error {
			b.Write([]byte("bye"))
			b.Close()
			if err := expectEOF(a, "bye"); err != nil {
				return err
			}
			_, err := b.Write([]byte("x"))
			if !errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("write after close: %v", err)
			}
			return nil
		},
		"write after CloseWrite is EPIPE": func(a, b net.Conn) error {
			cw(a)
			if _, err := a.Write([]byte("x")); !errors.Is(err, syscall.EPIPE) {
				return fmt.Errorf("write after CloseWrite: %v", err)
			}
			return expectEOF(b, "")
		},
		"abortive close resets the peer": func(a, b net.Conn) error {
			a.(*Conn).SetLinger(0)
			a.Write([]byte("lost or not"))
			a.Close()
			for {
				_, err := b.Read(make([]byte, 64))
				if err == nil {
					continue
				}
				if !errors.Is(err, syscall.ECONNRESET) {
					return fmt.Errorf("read after the peer's reset: %v", err)
				}
				break
			}
			if _, err := b.Write([]byte("x")); !errors.Is(err, syscall.ECONNRESET) {
				return fmt.Errorf("write after the peer's reset: %v", err)
			}
			return nil
		},
		"close with unread data resets": func(a, b net.Conn) error {
			a.Write([]byte("never read"))
			if err := eventually(func() bool { return unread(b) > 0 }); err != nil {
				return err
			}
			b.Close()
			return eventually(func() bool {
				_, err := a.Write([]byte("x"))
				return errors.Is(err, syscall.ECONNRESET)
			})
		},
	}
	for name, run := range cases {
		t.Run(name, func(t *testing.T) {
			a, b := pair(t, l, &Dialer{})
			defer a.Close()
			defer b.Close()
			if err := run(a, b); err != nil {
				t.Fatal(err)
			}
		})
	}
	l.Close()
	settle(t)
}

// TestDialContextCancelled: a cancelled dial returns the context's error
// and leaves nothing behind.
func TestDialContextCancelled(t *testing.T) {
	// An RDMA_CM peer that receives and never answers.
	mute, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer mute.Close()
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(100 * time.Millisecond); cancel() }()
	_, err = (&Dialer{Mode: ModeCM}).DialContext(ctx, "tcp", mute.LocalAddr().String())
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("%v, want context.Canceled", err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	if _, err := DialContext(ctx, "tcp", "127.0.0.1:1"); err == nil {
		t.Fatal("a dial with a cancelled context succeeded")
	}
	_, err = (&Dialer{Mode: ModeCM, Timeout: 50 * time.Millisecond}).Dial("tcp", mute.LocalAddr().String())
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("%v, want a timeout", err)
	}
	settle(t)
}

// TestFallbackOffIsAnError: with fallback off, a plain TCP server is an
// error, and it never sees a byte.
func TestFallbackOffIsAnError(t *testing.T) {
	plain, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	got := make(chan int, 1)
	go func() {
		c, err := plain.Accept()
		if err != nil {
			return
		}
		n, _ := io.Copy(io.Discard, c)
		got <- int(n)
	}()
	_, err = (&Dialer{NoFallback: true}).Dial("tcp", plain.Addr().String())
	if !errors.Is(err, ErrNotVRoCE) {
		t.Fatalf("%v, want ErrNotVRoCE", err)
	}
	if n := <-got; n != 0 {
		t.Fatalf("the plain server got %d bytes", n)
	}
	t.Setenv("RSOCK_FALLBACK", "0")
	if _, err := Dial("tcp", plain.Addr().String()); !errors.Is(err, ErrNotVRoCE) {
		t.Fatalf("RSOCK_FALLBACK=0: %v", err)
	}
	settle(t)
}

// TestOnePortServesEveryKindOfClient: vRoCE clients of both modes and a
// plain TCP client, at once, on one listener.
func TestOnePortServesEveryKindOfClient(t *testing.T) {
	l := listen(t, &ListenConfig{}, "127.0.0.1:0")
	served := echoServer(t, l)
	dials := map[string]func() (net.Conn, error){
		"socket": func() (net.Conn, error) { return Dial("tcp", l.Addr().String()) },
		"cm":     func() (net.Conn, error) { return (&Dialer{Mode: ModeCM}).Dial("tcp", l.Addr().String()) },
		"plain":  func() (net.Conn, error) { return net.Dial("tcp", l.Addr().String()) },
	}
	var wg sync.WaitGroup
	for name, dial := range dials {
		wg.Go(func() {
			c, err := dial()
			if err != nil {
				t.Error(name, err)
				return
			}
			defer c.Close()
			if err := roundTrip(c, payload(7, 300000)); err != nil {
				t.Error(name, err)
			}
		})
	}
	wg.Wait()
	l.Close()
	served.Wait()
	settle(t)
}

// TestStreamsOverALossyNetwork: the simulated network under the
// streams drops, duplicates and reorders; every byte still arrives, in
// order, in both modes.
func TestStreamsOverALossyNetwork(t *testing.T) {
	network := sim.NewNetwork(sim.Config{Seed: 11, Loss: 0.02, Duplicate: 0.01, Reorder: 0.02})
	defer network.Close()
	for i, mode := range []string{ModeCM, ModeSocket} {
		t.Run(mode, func(t *testing.T) {
			lc := &ListenConfig{Mode: mode, Provider: "sim", ProviderOptions: network, DeviceAddr: "127.0.0.1:0"}
			addr := "127.0.0.1:0"
			if mode == ModeCM {
				addr = fmt.Sprintf("127.0.0.1:%d", 7000+i)
			}
			l := listen(t, lc, addr)
			served := echoServer(t, l)
			d := &Dialer{Mode: mode, Provider: "sim", ProviderOptions: network}
			var wg sync.WaitGroup
			for k := range 4 {
				wg.Go(func() {
					c, err := d.Dial("tcp", l.Addr().String())
					if err != nil {
						t.Error(err)
						return
					}
					defer c.Close()
					if err := roundTrip(c, payload(uint64(k), 2<<20)); err != nil {
						t.Error(err)
					}
				})
			}
			wg.Wait()
			l.Close()
			served.Wait()
			settle(t)
		})
	}
	if s := network.Stats(); s.Lost == 0 || s.Duplicated == 0 {
		t.Fatalf("the network did no harm: %+v", s)
	}
}

// TestKeepaliveFindsADeadPeer: the path to the peer goes dark; the idle
// stream's keepalive goes unanswered and a blocked Read fails with
// ETIMEDOUT, as TCP's keepalive would. Another stream of the same device
// keeps alive by the hour, which sets the keepalive loop looking every
// quarter hour until the stream of 50 ms comes: the loop paces itself by
// the shortest period, or this stream would wait past the test.
func TestKeepaliveFindsADeadPeer(t *testing.T) {
	network := sim.NewNetwork(sim.Config{})
	defer network.Close()
	lc := &ListenConfig{Mode: ModeCM, Provider: "sim", ProviderOptions: network, DeviceAddr: "127.0.0.1:0", KeepAlive: -1}
	l := listen(t, lc, "127.0.0.1:7100")
	slow := &Dialer{Mode: ModeCM, Provider: "sim", ProviderOptions: network, DeviceAddr: "127.0.0.2:7100", KeepAlive: time.Hour}
	slowC, slowS := pair(t, l, slow)
	d := *slow
	d.KeepAlive = 50 * time.Millisecond
	c, s := pair(t, l, &d)
	require.Equal(t, slowC.LocalAddr().String(), c.LocalAddr().String(), "both streams from one device")
	network.Partition(netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2"))
	start := time.Now()
	_, err := c.Read(make([]byte, 1))
	if !errors.Is(err, syscall.ETIMEDOUT) {
		t.Fatalf("%v, want ETIMEDOUT", err)
	}
	t.Logf("a dead peer found after %v", time.Since(start).Round(time.Millisecond))
	c.Close()
	slowC.Close()
	network.Heal() // the DREQs get through, and the server's streams end
	s.Close()
	slowS.Close()
	l.Close()
	settle(t)
}

// The keepalive check dates a direction's last message by the check that
// first saw its count change: a stream busy in one direction is not idle
// in it, and one that stopped is idle from the check that saw its last
// message, not from its first.
func TestKeepaliveDatesActivityByItsChecks(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	a := activity{rxAt: t0, txAt: t0}
	a.update(3, 0, at(10)) // three received since the start
	a.update(5, 1, at(20))
	a.update(5, 1, at(30)) // nothing since
	a.update(5, 2, at(40))
	if !a.rxAt.Equal(at(20)) || !a.txAt.Equal(at(40)) {
		t.Fatalf("last receive dated %v, last send %v; want 20 ms and 40 ms", a.rxAt.Sub(t0), a.txAt.Sub(t0))
	}
}

// TestPeerProcessKilledMidTransfer: another process streams to us and is
// killed (no FIN, no DREQ, its UDP port just goes). The reader gets the
// data that arrived, then, its keepalive unanswered, ETIMEDOUT.
func TestPeerProcessKilledMidTransfer(t *testing.T) {
	l := listen(t, &ListenConfig{KeepAlive: 100 * time.Millisecond}, "127.0.0.1:0")
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), "RSOCK_TEST_WRITER="+l.Addr().String())
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if transport(c) != "vroce" {
		t.Fatalf("transport %s", transport(c))
	}
	if _, err := io.ReadFull(c, make([]byte, 4<<20)); err != nil {
		t.Fatal(err)
	}
	child.Process.Kill()
	child.Wait()
	start := time.Now()
	_, err = io.Copy(io.Discard, c)
	if !errors.Is(err, syscall.ETIMEDOUT) {
		t.Fatalf("reading from a killed peer: %v, want ETIMEDOUT", err)
	}
	t.Logf("the killed peer found after %v", time.Since(start).Round(time.Millisecond))
	c.Close()
	l.Close()
	settle(t)
}

// eventually polls cond, for state that has no completion to wait on,
// and fails after five seconds.
func eventually(cond func() bool) error {
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			return errors.New("timed out waiting for a condition")
		}
	}
	return nil
}

// unread is how many received messages a stream holds unread.
func unread(c net.Conn) int {
	s := c.(*Conn).s
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rq.Len()
}

// A plain TCP client's first bytes, read by the listener to tell it from a
// vRoCE client, are still behind the read deadline and the errors of
// netconn's rules: a passed deadline times out before them, and reading
// them after a Close is net.ErrClosed.
func TestFallbackPrefixKeepsDeadlineAndErrorRules(t *testing.T) {
	l := listen(t, &ListenConfig{}, "127.0.0.1:0")
	client, err := net.Dial("tcp", l.Addr().String())
	require.NoError(t, err)
	defer client.Close()
	_, err = client.Write([]byte("hello"))
	require.NoError(t, err)
	c, err := l.Accept()
	require.NoError(t, err)
	require.Equal(t, "tcp", transport(c))

	require.NoError(t, c.SetReadDeadline(time.Now().Add(-time.Second)))
	_, err = c.Read(make([]byte, 5))
	var op *net.OpError
	require.ErrorAs(t, err, &op)
	assert.True(t, op.Timeout(), "%v", err)
	assert.Equal(t, &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.ErrDeadlineExceeded}, op)

	require.NoError(t, c.SetDeadline(time.Time{}))
	buf := make([]byte, 2)
	n, err := c.Read(buf)
	require.NoError(t, err)
	assert.Equal(t, "he", string(buf[:n]), "the prefix, once the deadline is gone")

	require.NoError(t, c.Close())
	_, err = c.Read(buf)
	assert.ErrorIs(t, err, net.ErrClosed)
	l.Close()
	settle(t)
}
