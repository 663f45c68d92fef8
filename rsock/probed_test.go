package rsock

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"vroce.dev/vroce/cm"
)

// When a late client probes the service, if at all.
type probeTiming int

const (
	noProbe probeTiming = iota
	probeFirst
	// probeAfterConnect: the probe reaches the listener only after it
	// accepted the connection, as a dialer's probe, sent with its SYN,
	// can on a loaded machine.
	probeAfterConnect
)

// lateExchange connects to l over TCP and starts the SOCKET exchange only
// after twice the listener's plain detection wait, as a dialer whose
// probe a swamped listener answered late does; it returns what Accept
// gives the listener for it.
func lateExchange(t *testing.T, l net.Listener, probe probeTiming) net.Conn {
	t.Helper()
	raddr := l.Addr().(*net.TCPAddr).AddrPort()
	raddr = netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), raddr.Port())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	probeNow := func() {
		if r, err := cm.Probe(ctx, raddr, 0); err != nil || r != cm.ProbeListening {
			t.Errorf("probe: %v %v", r, err)
		}
	}
	if probe == probeFirst {
		probeNow()
	}
	d := &Dialer{}
	st, err := d.clientStack(raddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.unref(false) })
	s, err := st.newStream(d.keepAlive())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { <-done })
	tc, err := net.DialTCP("tcp", nil, net.TCPAddrFromAddrPort(raddr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tc.Close() }) // ends an exchange nobody answers
	go func() {
		defer close(done)
		// The lateness is the scenario, not a wait for something.
		if probe == probeAfterConnect {
			time.Sleep(detectTimeout / 2)
			probeNow()
		}
		time.Sleep(2 * detectTimeout)
		if exchange(ctx, tc, tc, s) != nil {
			s.teardown(false)
			return
		}
		newConn(s, "tcp", tc.LocalAddr(), tc.RemoteAddr()).Close() // a FIN the listener's side hears
	}()
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestAProberSlowToSendTheExchangeIsStillVRoCE: a client whose exchange
// comes after the listener's 200 ms detection wait is taken for a plain
// TCP client (the control), unless its host probed the service, as every
// vRoCE dialer does: then the listener waits for it and serves it over
// vRoCE. That holds too when the probe reaches the listener only after
// it accepted the connection, within the detection wait (a loaded CI
// machine served the first dial of a burst as plain TCP this way). Each
// case has a listener of its own: one remembers a host that probed it.
func TestAProberSlowToSendTheExchangeIsStillVRoCE(t *testing.T) {
	t.Cleanup(func() { settle(t) }) // last: every stack closed
	for _, c := range []struct {
		name  string
		probe probeTiming
		want  string
	}{
		{"a late client that did not probe (the detection wait)", noProbe, "tcp"},
		{"a late client that probed first", probeFirst, "vroce"},
		{"a late client that probed after connecting", probeAfterConnect, "vroce"},
	} {
		l := listen(t, &ListenConfig{}, "127.0.0.1:0")
		if got := transport(lateExchange(t, l, c.probe)); got != c.want {
			t.Fatalf("%s: served over %s, want %s", c.name, got, c.want)
		}
	}
}
