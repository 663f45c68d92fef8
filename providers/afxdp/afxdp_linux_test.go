package afxdp_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"vroce.dev/internal/testkit/streamtest"

	"vroce.dev/internal/testkit/netnstest"
	"vroce.dev/internal/testkit/providertest"
	"vroce.dev/internal/testkit/verbstest"
	"vroce.dev/providers/afxdp"
	_ "vroce.dev/providers/udp"
	"vroce.dev/rsock"
	"vroce.dev/vroce"
)

// openAFXDP opens an AF_XDP device on h's veth, inside h's namespace.
func openAFXDP(t *testing.T, h netnstest.Host, addr string) (*vroce.Device, *afxdp.Provider) {
	t.Helper()
	var dev *vroce.Device
	var prov *afxdp.Provider
	netnstest.In(t, h.NS, func() {
		p, err := afxdp.Open(addr, afxdp.Options{Iface: h.Dev})
		if err != nil {
			t.Fatal(err)
		}
		d, err := vroce.OpenWithProvider(p, vroce.Config{})
		if err != nil {
			p.Close()
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		dev, prov = d, p
	})
	return dev, prov
}

// Verbs traffic between two AF_XDP devices: 16 MiB each way, many times
// the frames each socket has, after which the frames are back where they
// belong: every TX frame free, and the receive frames in the fill and RX
// rings but for the few a copy-mode kernel keeps in its own cache for the
// next packet (a frame lost on our receive path starves the fill ring, as
// an early version did within a megabyte).
func TestVerbsBetweenAFXDPDevices(t *testing.T) {
	ha, hb := netnstest.Link(t, netnstest.LinkOpts{})
	da, pa := openAFXDP(t, ha, ha.IP+":4791")
	db, pb := openAFXDP(t, hb, hb.IP+":4791")
	o := verbstest.DefaultOpts()
	o.BufSize = 32 << 20
	a, b := verbstest.Pair(t, da, db, o)
	verbstest.Exercise(t, a, b, 16<<20)
	for _, p := range []*afxdp.Provider{pa, pb} {
		st := p.Stats()
		if st.RxPackets < 4*afxdp.Frames || st.RxInvalid != 0 {
			t.Fatalf("stats %+v", st)
		}
		const kernelCache = 64
		settled := func(rx, tx []int) bool { return rx[0] >= afxdp.Frames-kernelCache && tx[0] == afxdp.Frames }
		rx, tx := afxdp.FrameAccount(p)
		for deadline := time.Now().Add(5 * time.Second); !settled(rx, tx) && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond) // a last ACK may be on its way through
			rx, tx = afxdp.FrameAccount(p)
		}
		if !settled(rx, tx) {
			t.Fatalf("frames: %d of %d with the kernel for receiving, %d of %d free for sending", rx[0], afxdp.Frames, tx[0], afxdp.Frames)
		}
		t.Logf("%+v", st)
	}
}

// Each end's device opens in its namespace; a is the requester.
func openPair(t *testing.T, da, db *vroce.Device) (a, b *verbstest.Node) {
	o := verbstest.DefaultOpts()
	o.BufSize = 4 << 20
	return verbstest.Pair(t, da, db, o)
}

func openUDP(t *testing.T, h netnstest.Host, addr string) *vroce.Device {
	t.Helper()
	var d *vroce.Device
	netnstest.In(t, h.NS, func() { d = verbstest.OpenDevice(t, vroce.Config{Provider: "udp", Addr: addr}) })
	return d
}

// The wire is the same: an AF_XDP device and a UDP-provider device
// exchange verbs traffic both ways, over IPv4 and IPv6.
func TestInteropWithUDPProvider(t *testing.T) {
	ha, hb := netnstest.Link(t, netnstest.LinkOpts{})
	for _, fam := range []struct{ name, a, b string }{
		{"ipv4", ha.IP + ":4791", hb.IP + ":4791"},
		{"ipv6", "[" + ha.IP6 + "]:4792", "[" + hb.IP6 + "]:4792"},
	} {
		t.Run(fam.name, func(t *testing.T) {
			dx, px := openAFXDP(t, ha, fam.a)
			du := openUDP(t, hb, fam.b)
			x, u := openPair(t, dx, du)
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("AF_XDP %+v dev %+v", px.Stats(), dx.Stats())
					t.Logf("UDP dev %+v", du.Stats())
				}
			})
			verbstest.Exercise(t, x, u, 1<<20) // AF_XDP requests
			u2, x2 := openPair(t, du, dx)
			verbstest.Exercise(t, u2, x2, 1<<20) // UDP requests
			st := px.Stats()
			if st.RxPackets == 0 || st.TxPackets == 0 || st.RxInvalid != 0 {
				t.Fatalf("AF_XDP provider stats %+v", st)
			}
			dx.Close()
		})
	}
}

// xdpAttached reports whether ip shows an XDP program on h's veth.
func xdpAttached(t *testing.T, h netnstest.Host) bool {
	t.Helper()
	return strings.Contains(netnstest.Sh(t, "", "ip", "-n", h.NS, "link", "show", "dev", h.Dev), "xdp")
}

// While the program is attached, everything that is not vRoCE still
// reaches the kernel: ARP (the neighbour tables start empty), kernel TCP,
// and UDP to another port. The provider's own first packets wait for the
// kernel to resolve the peer. After Close nothing is left on the link.
func TestKernelTrafficPassesAndCloseDetaches(t *testing.T) {
	ha, hb := netnstest.Link(t, netnstest.LinkOpts{})
	dx, px := openAFXDP(t, ha, ha.IP+":4791")
	if !xdpAttached(t, ha) {
		t.Fatal("no XDP program on the link after Open")
	}
	for _, h := range []netnstest.Host{ha, hb} {
		netnstest.Sh(t, "", "ip", "-n", h.NS, "neigh", "flush", "dev", h.Dev)
	}

	var ln net.Listener
	var pc net.PacketConn
	netnstest.In(t, ha.NS, func() {
		var err error
		if ln, err = net.Listen("tcp", ha.IP+":0"); err != nil {
			t.Fatal(err)
		}
		if pc, err = net.ListenPacket("udp", ha.IP+":0"); err != nil {
			t.Fatal(err)
		}
	})
	defer ln.Close()
	defer pc.Close()
	accepted := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			accepted <- nil
			return
		}
		defer c.Close()
		b, _ := io.ReadAll(c)
		accepted <- b
	}()
	netnstest.In(t, hb.NS, func() {
		c, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
		if err != nil {
			t.Fatalf("kernel TCP across the attached link: %v", err)
		}
		c.Write([]byte("kernel tcp"))
		c.Close()
		u, err := net.Dial("udp", pc.LocalAddr().String())
		if err != nil {
			t.Fatal(err)
		}
		u.Write([]byte("kernel udp"))
		u.Close()
	})
	if got := <-accepted; string(got) != "kernel tcp" {
		t.Fatalf("TCP carried %q", got)
	}
	pc.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 64)
	n, _, err := pc.ReadFrom(buf)
	if err != nil || string(buf[:n]) != "kernel udp" {
		t.Fatalf("UDP to another port: %q, %v", buf[:n], err)
	}
	if !strings.Contains(netnstest.Sh(t, "", "ip", "-n", ha.NS, "neigh", "show", hb.IP), "lladdr") {
		t.Fatal("ARP did not resolve the peer while the program was attached")
	}

	// vRoCE to a peer the provider must resolve itself.
	netnstest.Sh(t, "", "ip", "-n", ha.NS, "neigh", "flush", "dev", ha.Dev)
	du := openUDP(t, hb, hb.IP+":4791")
	x, u := openPair(t, dx, du)
	verbstest.Exercise(t, x, u, 64<<10)

	st := px.Stats()
	dx.Close()
	if xdpAttached(t, ha) {
		t.Fatal("the XDP program is still attached after Close")
	}
	t.Logf("stats %+v", st)
	// The interface is free again.
	_, p2 := openAFXDP(t, ha, ha.IP+":4791")
	p2.Close()
}

// A process killed with the program attached leaves nothing on the
// interface (the attachment is a BPF link, which ends with its process),
// and the next Open succeeds.
func TestKilledProcessLeavesNothing(t *testing.T) {
	ha, _ := netnstest.Link(t, netnstest.LinkOpts{})
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "AFXDP_TEST_CHILD="+ha.NS+","+ha.Dev+","+ha.IP+":4791")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	sc := bufio.NewScanner(out)
	for sc.Scan() && sc.Text() != "ready" {
		t.Log("child:", sc.Text())
	}
	if !xdpAttached(t, ha) {
		t.Fatal("the child's program is not attached")
	}
	// While it lives, the interface is taken, and Open says so.
	netnstest.In(t, ha.NS, func() {
		if p, err := afxdp.Open(ha.IP+":4792", afxdp.Options{Iface: ha.Dev}); err == nil {
			p.Close()
			t.Fatal("a second device opened on an interface in use")
		} else if !strings.Contains(err.Error(), "in use by another vRoCE device") {
			t.Fatalf("second device: %v", err)
		}
	})
	cmd.Process.Kill()
	cmd.Wait()
	if xdpAttached(t, ha) {
		t.Fatal("the killed process's program is still attached")
	}
	_, p := openAFXDP(t, ha, ha.IP+":4791")
	p.Close()
}

// An interface with several queues gets a socket on each, so no flow is
// lost whichever queue it lands on. The UDP peer is made to send on its
// second queue (XPS), which a veth delivers to our second queue; what we
// send goes out of our first.
func TestSeveralQueues(t *testing.T) {
	ha, hb := netnstest.Link(t, netnstest.LinkOpts{Queues: 2})
	allCPUs := fmt.Sprintf("%x", 1<<runtime.NumCPU()-1)
	netnstest.Sh(t, "", "ip", "netns", "exec", hb.NS, "sh", "-c",
		fmt.Sprintf("echo 0 > /sys/class/net/%[1]s/queues/tx-0/xps_cpus && echo %[2]s > /sys/class/net/%[1]s/queues/tx-1/xps_cpus", hb.Dev, allCPUs))
	dx, px := openAFXDP(t, ha, ha.IP+":4791")
	if q := px.Stats().Queues; q != 2 {
		t.Fatalf("%d sockets on a 2-queue interface", q)
	}
	du := openUDP(t, hb, hb.IP+":4791")
	u, x := openPair(t, du, dx)
	verbstest.Exercise(t, u, x, 1<<20)
	st := px.Stats()
	if st.RxPerQueue[1] == 0 {
		t.Fatalf("nothing arrived on queue 1: %+v", st)
	}
	t.Logf("received per queue: %v", st.RxPerQueue)
}

// In generic (skb) mode, which a driver without XDP of its own gets and
// Options.Generic asks for, the data path works the same.
func TestGenericMode(t *testing.T) {
	ha, hb := netnstest.Link(t, netnstest.LinkOpts{})
	var dx *vroce.Device
	var px *afxdp.Provider
	netnstest.In(t, ha.NS, func() {
		var err error
		if px, err = afxdp.Open(ha.IP+":4791", afxdp.Options{Iface: ha.Dev, Generic: true}); err != nil {
			t.Fatal(err)
		}
		if dx, err = vroce.OpenWithProvider(px, vroce.Config{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { dx.Close() })
	})
	if !px.Stats().Generic || !strings.Contains(netnstest.Sh(t, "", "ip", "-n", ha.NS, "link", "show", "dev", ha.Dev), "xdpgeneric") {
		t.Fatal("not in generic mode")
	}
	du := openUDP(t, hb, hb.IP+":4791")
	x, u := openPair(t, dx, du)
	verbstest.Exercise(t, x, u, 1<<20)
	u2, x2 := openPair(t, du, dx)
	verbstest.Exercise(t, u2, x2, 1<<20)
}

// Without the capabilities it needs, Open fails with a PrivilegeError that
// names them all, before it changes anything.
func TestUnprivilegedOpenNamesCapabilities(t *testing.T) {
	ha, _ := netnstest.Link(t, netnstest.LinkOpts{})
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "AFXDP_TEST_UNPRIVILEGED="+ha.NS+","+ha.Dev)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 2 || lines[0] != "true" {
		t.Fatalf("not a PrivilegeError: %s", out)
	}
	for _, c := range []string{"CAP_NET_RAW", "CAP_NET_ADMIN", "CAP_BPF"} {
		if !strings.Contains(lines[1], c) {
			t.Fatalf("error does not name %s: %s", c, lines[1])
		}
	}
	if xdpAttached(t, ha) {
		t.Fatal("a program was attached")
	}
	t.Log(lines[1])
}

// rsock streams run over AF_XDP devices unchanged, in both connection
// modes: a megabyte each way through an echo server, every byte checked.
func TestRsockStreamsOverAFXDP(t *testing.T) {
	ha, hb := netnstest.Link(t, netnstest.LinkOpts{})
	for i, mode := range []string{rsock.ModeSocket, rsock.ModeCM} {
		t.Run(mode, func(t *testing.T) {
			// Each run's devices must be gone before the next one takes
			// the interfaces: an interface serves one AF_XDP device.
			defer func() {
				ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
				defer cancel()
				if err := rsock.Drain(ctx); err != nil {
					t.Fatal(err)
				}
			}()
			var ln net.Listener
			netnstest.In(t, ha.NS, func() {
				lc := rsock.ListenConfig{Mode: mode, Provider: "afxdp", ProviderOptions: afxdp.Options{Iface: ha.Dev}}
				var err error
				if ln, err = lc.Listen(context.Background(), "tcp", fmt.Sprintf("%s:%d", ha.IP, 7000+i)); err != nil {
					t.Fatal(err)
				}
			})
			defer ln.Close()
			go streamtest.ServeEcho(ln)
			var c net.Conn
			netnstest.In(t, hb.NS, func() {
				d := rsock.Dialer{Mode: mode, Provider: "afxdp", ProviderOptions: afxdp.Options{Iface: hb.Dev}, NoFallback: true, Timeout: 10 * time.Second}
				var err error
				if c, err = d.Dial("tcp", ln.Addr().String()); err != nil {
					t.Fatal(err)
				}
			})
			defer c.Close()
			if tr := c.(interface{ Transport() string }).Transport(); tr != "vroce" {
				t.Fatalf("transport %q", tr)
			}
			if err := streamtest.Echoed(c, 1<<20); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A steady stream of batches between two AF_XDP providers allocates
// nothing: frames are recycled through the rings, headers written in
// place, next hops looked up in a map.
func TestNoAllocationPerPacket(t *testing.T) {
	tx, rx := providerPair(t)
	out := make([]vroce.Packet, 32)
	for i := range out {
		out[i] = vroce.Packet{Data: make([]byte, 1000), Addr: rx.LocalAddr()}
	}
	if a := providertest.AllocsPerBatch(t, tx, rx, out); a > 0 {
		t.Fatalf("%.1f allocations per batch of %d packets", a, len(out))
	}
}

// A packet larger than the link carries is refused with an error, and the
// rest of its batch still goes.
func TestSendRefusesOversizeAndSendsTheRest(t *testing.T) {
	tx, rx := providerPair(t)
	to := rx.LocalAddr()
	batch := []vroce.Packet{{Data: []byte("first"), Addr: to}, {Data: make([]byte, 3000), Addr: to}, {Data: []byte("last"), Addr: to}}
	if err := tx.Send(batch); err == nil || !strings.Contains(err.Error(), "MTU") {
		t.Fatalf("oversize packet: %v", err)
	}
	var got []string
	for _, p := range providertest.Receive(t, rx, 2, 4) {
		got = append(got, string(p.Data))
	}
	if len(got) != 2 || got[0] != "first" || got[1] != "last" {
		t.Fatalf("received %q", got)
	}
}

// providerPair opens an AF_XDP provider at each end of a veth pair, the
// first through VROCE_IFACE.
func providerPair(t *testing.T) (tx, rx *afxdp.Provider) {
	tx, rx, _, _ = providerPairOn(t)
	return tx, rx
}

// providerPairOn is providerPair, with the hosts the providers run on.
func providerPairOn(t *testing.T) (tx, rx *afxdp.Provider, ha, hb netnstest.Host) {
	ha, hb = netnstest.Link(t, netnstest.LinkOpts{})
	t.Setenv("VROCE_IFACE", ha.Dev)
	netnstest.In(t, ha.NS, func() {
		var err error
		if tx, err = afxdp.Open(ha.IP+":4791", afxdp.Options{}); err != nil {
			t.Fatal(err)
		}
	})
	t.Cleanup(func() { tx.Close() })
	netnstest.In(t, hb.NS, func() {
		var err error
		if rx, err = afxdp.Open(hb.IP+":4791", afxdp.Options{Iface: hb.Dev}); err != nil {
			t.Fatal(err)
		}
	})
	t.Cleanup(func() { rx.Close() })
	return tx, rx, ha, hb
}

// On a 9000-byte link the path MTU stops at 2048: a 4096-byte packet
// does not fit in one UMEM frame. Traffic at 2048 works both ways with a
// UDP-provider peer, whose own limit would be the 8192 extension MTU.
func TestJumboLinkCapsPathMTUAt2048(t *testing.T) {
	ha, hb := netnstest.Link(t, netnstest.LinkOpts{})
	for _, h := range []netnstest.Host{ha, hb} {
		netnstest.Sh(t, "", "ip", "-n", h.NS, "link", "set", h.Dev, "mtu", "9000")
	}
	dx, _ := openAFXDP(t, ha, ha.IP+":4791")
	du := openUDP(t, hb, hb.IP+":4791")
	if got := dx.Attr().ActiveMTU; got != vroce.MTU2048 {
		t.Fatalf("AF_XDP device active MTU %d on a 9000-byte link, want 2048", got)
	}
	if got := du.Attr().ActiveMTU; got != vroce.MTU8192 {
		t.Fatalf("UDP device active MTU %d on a 9000-byte link, want 8192", got)
	}
	o := verbstest.DefaultOpts()
	o.BufSize = 4 << 20
	o.MTU = vroce.MTU2048
	x, u := verbstest.Pair(t, dx, du, o)
	verbstest.Exercise(t, x, u, 1<<20)
	u2, x2 := verbstest.Pair(t, du, dx, o)
	verbstest.Exercise(t, u2, x2, 1<<20)
}

// An interface deleted under a device ends the device, visibly: an AF_XDP
// socket whose interface is gone polls as if idle, so the provider watches
// for the deletion and fails, and the device reports EventDeviceFatal and
// flushes its QPs' work, instead of waiting forever.
func TestDeletedInterfaceIsDeviceFatal(t *testing.T) {
	ha, hb := netnstest.Link(t, netnstest.LinkOpts{})
	dx, _ := openAFXDP(t, ha, ha.IP+":4791")
	du := openUDP(t, hb, hb.IP+":4791")
	x, _ := openPair(t, dx, du)
	if err := x.QP.PostRecv(vroce.RecvWR{ID: 9, SGL: []vroce.SGE{x.MR.SGE(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	netnstest.Sh(t, "", "ip", "-n", ha.NS, "link", "del", ha.Dev)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ev, err := dx.AsyncEvent(ctx)
	if err != nil {
		t.Fatalf("no event after the interface was deleted: %v", err)
	}
	if ev.Type != vroce.EventDeviceFatal || !errors.Is(ev.Err, vroce.ErrProviderFailed) || !errors.Is(ev.Err, syscall.ENODEV) {
		t.Fatalf("event %v: %v", ev.Type, ev.Err)
	}
	wcs := verbstest.WaitCompletions(t, x.CQ, 1, 10*time.Second)
	if wcs[0].ID != 9 || wcs[0].Status != vroce.WCWRFlushErr {
		t.Fatalf("receive WR after the failure: %+v", wcs[0])
	}
	t.Log(ev.Err)
}

// The program takes only what is addressed to the device: a kernel socket
// on another address of the same interface, same port (another RoCE stack,
// say), still gets its datagrams while the device works beside it.
func TestOtherAddressOnTheInterfaceStaysWithTheKernel(t *testing.T) {
	ha, hb := netnstest.Link(t, netnstest.LinkOpts{})
	other := strings.TrimSuffix(ha.IP, ".1") + ".3"
	netnstest.Sh(t, "", "ip", "-n", ha.NS, "addr", "add", other+"/24", "dev", ha.Dev)
	dx, px := openAFXDP(t, ha, ha.IP+":4791")
	var kernel net.PacketConn
	netnstest.In(t, ha.NS, func() {
		var err error
		if kernel, err = net.ListenPacket("udp", other+":4791"); err != nil {
			t.Fatal(err)
		}
	})
	defer kernel.Close()
	netnstest.In(t, hb.NS, func() {
		c, err := net.Dial("udp", other+":4791")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write([]byte("for the kernel"))
	})
	kernel.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 64)
	n, _, err := kernel.ReadFrom(buf)
	if err != nil || string(buf[:n]) != "for the kernel" {
		t.Fatalf("kernel socket on %s:4791: %q, %v (AF_XDP stats %+v)", other, buf[:n], err, px.Stats())
	}
	du := openUDP(t, hb, hb.IP+":4791")
	x, u := openPair(t, dx, du)
	verbstest.Exercise(t, x, u, 64<<10)
}

// A driver with no XDP of its own (a bridge) makes the driver-mode attach
// fail; the provider falls back to generic mode by itself.
func TestFallsBackToGenericMode(t *testing.T) {
	ha, _ := netnstest.Link(t, netnstest.LinkOpts{})
	netnstest.Sh(t, "", "ip", "-n", ha.NS, "link", "add", "vrbr", "type", "bridge")
	netnstest.Sh(t, "", "ip", "-n", ha.NS, "addr", "add", "10.251.0.1/24", "dev", "vrbr")
	netnstest.Sh(t, "", "ip", "-n", ha.NS, "link", "set", "vrbr", "up")
	_, px := openAFXDP(t, netnstest.Host{NS: ha.NS, Dev: "vrbr"}, "10.251.0.1:4791")
	if !px.Stats().Generic {
		t.Fatal("attached in driver mode on a bridge")
	}
	if !strings.Contains(netnstest.Sh(t, "", "ip", "-n", ha.NS, "link", "show", "dev", "vrbr"), "xdpgeneric") {
		t.Fatal("ip does not show a generic-mode program")
	}
}

// The AF_XDP provider keeps the contract every provider does; it fails
// for good when its interface is deleted.
func TestProviderConformance(t *testing.T) {
	hosts := map[vroce.Provider]netnstest.Host{}
	providertest.Run(t, func(t *testing.T) (vroce.Provider, vroce.Provider) {
		a, b, ha, hb := providerPairOn(t)
		hosts[a], hosts[b] = ha, hb
		return a, b
	}, func(t *testing.T, p vroce.Provider) {
		h := hosts[p]
		netnstest.Sh(t, "", "ip", "-n", h.NS, "link", "del", h.Dev)
	})
}
