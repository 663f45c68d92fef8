package rsock

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"vroce.dev/vroce/cm"
)

// lateExchange connects to l over TCP and starts the SOCKET exchange only
// after twice the listener's plain detection wait, as a dialer whose
// probe a swamped listener answered late does; it returns what Accept
// gives the listener for it.
func lateExchange(t *testing.T, l net.Listener, probeFirst bool) net.Conn {
	t.Helper()
	raddr := l.Addr().(*net.TCPAddr).AddrPort()
	raddr = netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), raddr.Port())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	if probeFirst {
		if r, err := cm.Probe(ctx, raddr, 0); err != nil || r != cm.ProbeListening {
			t.Fatalf("probe: %v %v", r, err)
		}
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
// TCP client, unless its host probed the service first, as every vRoCE
// dialer does: then the listener waits for it and serves it over vRoCE.
func TestAProberSlowToSendTheExchangeIsStillVRoCE(t *testing.T) {
	t.Cleanup(func() { settle(t) }) // last: every stack closed
	l := listen(t, &ListenConfig{}, "127.0.0.1:0")
	// Control: the same late exchange without a probe is plain TCP.
	if got := transport(lateExchange(t, l, false)); got != "tcp" {
		t.Fatalf("a late client that did not probe: served over %s, want tcp (the detection wait)", got)
	}
	if got := transport(lateExchange(t, l, true)); got != "vroce" {
		t.Fatalf("a late client that probed first: served over %s, want vroce", got)
	}
}
