package nspair

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// Make joins two fresh namespaces with a veth pair of the MTU asked for,
// each end with its address, and Close removes both.
func TestMakeAndClose(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("nspair: network namespaces need root (CI runs this as root)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("nspair: needs ip(8) (iproute2)")
	}
	p, err := Make("vroce-nspair-test", "10.81.0", 1400)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			p.Close()
		}
	}()
	for _, end := range []struct{ ns, dev, addr string }{{p.A, "vpA", p.AddrA}, {p.B, "vpB", p.AddrB}} {
		out, err := Command(end.ns, "ip", "addr", "show", end.dev).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v: %s", end.ns, err, out)
		}
		if !strings.Contains(string(out), end.addr+"/24") || !strings.Contains(string(out), "mtu 1400") || !strings.Contains(string(out), "UP") {
			t.Fatalf("%s's %s: want %s/24, mtu 1400, up:\n%s", end.ns, end.dev, end.addr, out)
		}
		reuse, err := Command(end.ns, "cat", "/proc/sys/net/ipv4/tcp_tw_reuse").Output()
		if err != nil || strings.TrimSpace(string(reuse)) != "1" {
			t.Fatalf("%s: tcp_tw_reuse %q (%v), want 1", end.ns, reuse, err)
		}
	}
	p.Close()
	closed = true
	out, _ := exec.Command("ip", "netns", "list").Output()
	if strings.Contains(string(out), p.A) || strings.Contains(string(out), p.B) {
		t.Fatalf("after Close the namespaces remain:\n%s", out)
	}
}

// DropUDP drops about the share asked of the datagrams a namespace
// receives, whatever their ports (vRoCE's 4791 or a stream's ephemeral
// ones), one draw each, none at 0%, and nothing once removed: datagrams
// from B to A are counted as they arrive in A.
func TestDropUDPDropsTheShareAskedOfEveryDatagram(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("nspair: network namespaces need root (CI runs this as root)")
	}
	for _, tool := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("nspair: needs %s (iproute2, nftables)", tool)
		}
	}
	p, err := Make("vroce-nspair-loss", "10.82.0", 1500)
	require.NoError(t, err)
	defer p.Close()
	const n = 400
	a4791, err := listenIn(p.A, p.AddrA+":4791")
	require.NoError(t, err)
	aEphemeral, err := listenIn(p.A, p.AddrA+":0")
	require.NoError(t, err)
	aMarker, err := listenIn(p.A, p.AddrA+":0")
	require.NoError(t, err)
	bEphemeral, err := listenIn(p.B, p.AddrB+":0")
	require.NoError(t, err)
	b4791, err := listenIn(p.B, p.AddrB+":4791")
	require.NoError(t, err)
	for _, c := range []*net.UDPConn{a4791, aEphemeral, aMarker, bEphemeral, b4791} {
		defer c.Close()
		require.NoError(t, c.SetReadBuffer(4<<20))
	}
	// arrived sends n datagrams from `from` to `to`, then markers to
	// another socket until one arrives (they may be dropped too), and
	// counts what reached `to` by then.
	arrived := func(from, to *net.UDPConn) int {
		for range n {
			_, err := from.WriteToUDP([]byte("datagram"), to.LocalAddr().(*net.UDPAddr))
			require.NoError(t, err)
		}
		buf := make([]byte, 64)
		for try := 0; ; try++ {
			require.Less(t, try, 50, "no marker arrived")
			_, err := bEphemeral.WriteToUDP([]byte("marker"), aMarker.LocalAddr().(*net.UDPAddr))
			require.NoError(t, err)
			require.NoError(t, aMarker.SetReadDeadline(time.Now().Add(100*time.Millisecond)))
			if _, _, err := aMarker.ReadFromUDP(buf); err == nil {
				break
			}
		}
		got := 0
		rc, err := to.SyscallConn()
		require.NoError(t, err)
		require.NoError(t, rc.Read(func(fd uintptr) bool { // what has arrived, no more
			for {
				if _, _, err := unix.Recvfrom(int(fd), buf, unix.MSG_DONTWAIT); err != nil {
					return true
				}
				got++
			}
		}))
		return got
	}

	assert.GreaterOrEqual(t, arrived(bEphemeral, a4791), n*95/100, "no rules: everything arrives")
	require.NoError(t, p.DropUDP(0))
	assert.GreaterOrEqual(t, arrived(bEphemeral, a4791), n*95/100, "a rule that draws and drops none")

	require.NoError(t, p.DropUDP(50))
	for _, c := range []struct {
		name     string
		from, to *net.UDPConn
	}{
		{"to 4791", bEphemeral, a4791},
		{"from 4791", b4791, aEphemeral},
		{"between 4791s (one draw)", b4791, a4791},
		{"between ephemeral ports (a stream's)", bEphemeral, aEphemeral},
	} {
		got := arrived(c.from, c.to)
		assert.InDelta(t, n/2, got, n*15/100, "%s: %d of %d arrived, want about half", c.name, got, n)
	}

	require.NoError(t, p.NoLoss())
	assert.GreaterOrEqual(t, arrived(bEphemeral, aEphemeral), n*95/100, "rules removed: everything arrives")
	require.NoError(t, p.NoLoss(), "removing what is not there is no error")
	require.Error(t, p.DropUDP(101))
}

// listenIn opens a UDP socket on addr inside namespace ns: a socket
// belongs to the namespace of the thread that made it, so a locked
// thread enters ns for the call. If the thread cannot return to this
// process's namespace, it is not unlocked, and exits with the goroutine.
func listenIn(ns, addr string) (*net.UDPConn, error) {
	type result struct {
		c   *net.UDPConn
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		here, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			done <- result{err: err}
			return
		}
		defer here.Close()
		there, err := os.Open("/run/netns/" + ns)
		if err != nil {
			done <- result{err: err}
			return
		}
		defer there.Close()
		if err := unix.Setns(int(there.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- result{err: fmt.Errorf("setns %s: %w", ns, err)}
			return
		}
		udpAddr, err := net.ResolveUDPAddr("udp4", addr)
		var c *net.UDPConn
		if err == nil {
			c, err = net.ListenUDP("udp4", udpAddr)
		}
		if unix.Setns(int(here.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		done <- result{c, err}
	}()
	r := <-done
	return r.c, r.err
}
