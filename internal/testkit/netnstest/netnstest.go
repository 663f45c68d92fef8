//go:build linux

package netnstest

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// NeedRoot skips a test that needs root and the given host tools, saying
// why; in CI a missing piece is a failure.
func NeedRoot(t testing.TB, tools ...string) {
	t.Helper()
	missing := ""
	if os.Geteuid() != 0 {
		missing = "root (it creates network namespaces)"
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil && missing == "" {
			missing = tool + " (apt-get install iproute2 nftables ethtool)"
		}
	}
	if missing == "" {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("CI must run this test, but it needs %s", missing)
	}
	t.Skipf("needs %s; CI runs it", missing)
}

// Sh runs a command with stdin and fails the test if it fails.
func Sh(t testing.TB, stdin string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// In runs fn on a thread inside network namespace ns: sockets fn opens stay
// in ns for good.
func In(t testing.TB, ns string, fn func()) {
	t.Helper()
	leave, err := Enter(ns)
	if err != nil {
		t.Fatal(err)
	}
	fn()
	if err := leave(); err != nil {
		t.Fatal(err)
	}
}

// Enter locks the calling goroutine to its thread and moves the thread
// into namespace ns; leave moves it back and unlocks it. A thread that
// cannot move back stays locked and dies with its goroutine.
func Enter(ns string) (leave func() error, err error) {
	runtime.LockOSThread()
	orig, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	target, err := os.Open("/run/netns/" + ns)
	if err != nil {
		orig.Close()
		runtime.UnlockOSThread()
		return nil, err
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		orig.Close()
		runtime.UnlockOSThread()
		return nil, err
	}
	return func() error {
		defer orig.Close()
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("cannot return to the original namespace: %w", err)
		}
		runtime.UnlockOSThread()
		return nil
	}, nil
}

// Host is one end of a Link: a namespace with a veth in it.
type Host struct {
	NS, Dev  string
	IP       string // without prefix length
	IP6      string // IPv6 address, without prefix length
	Prefixed string // IP with prefix length
}

// LinkOpts shapes a Link.
type LinkOpts struct {
	// Queues is how many receive and transmit queues each veth gets
	// (default 1).
	Queues int
}

var seq atomic.Int32

// Link creates two namespaces joined by a veth pair with IPv4 and IPv6
// addresses on one /24 (and /64), both up, and removes them when the test
// ends.
//
// Transmit checksum offload is off on both ends: a veth hands the peer
// packets whose UDP checksum is still partial, which the kernel's stack
// accepts but an XDP program or AF_XDP socket sees as they are. A real NIC
// completes the checksum before the wire.
func Link(t testing.TB, o LinkOpts) (a, b Host) {
	t.Helper()
	NeedRoot(t, "ip", "ethtool")
	n := seq.Add(1)
	id := fmt.Sprintf("%d-%d", os.Getpid(), n)
	net := fmt.Sprintf("10.%d.%d", 100+n%100, os.Getpid()%250)
	a = Host{NS: "vroce-a-" + id, Dev: fmt.Sprintf("vr%da", n), IP: net + ".1", IP6: fmt.Sprintf("fd00:%x::1", n)}
	b = Host{NS: "vroce-b-" + id, Dev: fmt.Sprintf("vr%db", n), IP: net + ".2", IP6: fmt.Sprintf("fd00:%x::2", n)}
	for _, h := range []Host{a, b} {
		Sh(t, "", "ip", "netns", "add", h.NS)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", h.NS).Run() })
		// No duplicate address detection on the new links: nobody else is
		// on them, and until it ends neighbour discovery stalls.
		Sh(t, "", "ip", "netns", "exec", h.NS, "sysctl", "-qw", "net.ipv6.conf.default.accept_dad=0")
	}
	q := fmt.Sprint(max(o.Queues, 1))
	Sh(t, "", "ip", "link", "add", a.Dev, "netns", a.NS, "numtxqueues", q, "numrxqueues", q, "type", "veth",
		"peer", "name", b.Dev, "netns", b.NS, "numtxqueues", q, "numrxqueues", q)
	for _, h := range []*Host{&a, &b} {
		h.Prefixed = h.IP + "/24"
		Sh(t, "", "ip", "-n", h.NS, "addr", "add", h.Prefixed, "dev", h.Dev)
		Sh(t, "", "ip", "-n", h.NS, "addr", "add", h.IP6+"/64", "dev", h.Dev, "nodad")
		Sh(t, "", "ip", "netns", "exec", h.NS, "ethtool", "-K", h.Dev, "tx", "off")
		Sh(t, "", "ip", "-n", h.NS, "link", "set", h.Dev, "up")
		Sh(t, "", "ip", "-n", h.NS, "link", "set", "lo", "up")
	}
	// Should detection run after all, wait for it to end.
	for _, h := range []Host{a, b} {
		deadline := time.Now().Add(10 * time.Second)
		for strings.TrimSpace(Sh(t, "", "ip", "-n", h.NS, "-6", "addr", "show", "dev", h.Dev, "tentative")) != "" {
			if time.Now().After(deadline) {
				t.Fatalf("%s: IPv6 addresses still tentative after 10 s", h.Dev)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return a, b
}
