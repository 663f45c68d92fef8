package udp_test

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"vroce.dev/internal/verbstest"
	"vroce.dev/vroce"
)

// needRoot skips a test that needs root and host tools, saying why; in CI,
// which runs as root, a missing piece is a failure, not a skip.
func needRoot(t *testing.T, tools ...string) {
	t.Helper()
	missing := ""
	if os.Geteuid() != 0 {
		missing = "root (it creates network namespaces and nftables rules)"
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil && missing == "" {
			missing = tool + " (apt-get install iproute2 nftables)"
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

func sh(t *testing.T, stdin string, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Stdin = strings.NewReader(stdin)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// inNetns runs fn on a thread inside network namespace ns: sockets fn
// opens stay in ns for good.
func inNetns(t *testing.T, ns string, fn func()) {
	t.Helper()
	runtime.LockOSThread()
	orig, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	target, err := os.Open("/run/netns/" + ns)
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		t.Fatal(err)
	}
	fn()
	if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
		t.Fatalf("cannot return to the original namespace: %v", err) // the thread dies with the goroutine
	}
	runtime.UnlockOSThread()
}

// TestTransferAcrossLossyVethBetweenNamespaces runs two devices in two
// network namespaces joined by a veth pair, with nftables dropping a random
// 3% of vRoCE datagrams in each direction, and verifies a WRITE and a READ
// of 1 MiB through the kernel's real UDP path.
func TestTransferAcrossLossyVethBetweenNamespaces(t *testing.T) {
	needRoot(t, "ip", "nft")
	nsA, nsB := fmt.Sprintf("vroce-a-%d", os.Getpid()), fmt.Sprintf("vroce-b-%d", os.Getpid())
	for _, ns := range []string{nsA, nsB} {
		sh(t, "", "ip", "netns", "add", ns)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	}
	sh(t, "", "ip", "link", "add", "vrA", "netns", nsA, "type", "veth", "peer", "name", "vrB", "netns", nsB)
	for _, c := range []struct{ ns, dev, addr string }{{nsA, "vrA", "10.199.0.1/24"}, {nsB, "vrB", "10.199.0.2/24"}} {
		sh(t, "", "ip", "-n", c.ns, "addr", "add", c.addr, "dev", c.dev)
		// A veth carries a UDP GSO burst whole, so nftables would drop
		// bursts; a real link carries segments. One segment per packet on
		// the veth makes the loss per datagram, as on a wire.
		sh(t, "", "ip", "-n", c.ns, "link", "set", c.dev, "gso_max_segs", "1")
		sh(t, "", "ip", "-n", c.ns, "link", "set", c.dev, "up")
		sh(t, "", "ip", "-n", c.ns, "link", "set", "lo", "up")
		sh(t, `table inet vroce_loss {
	chain in {
		type filter hook input priority 0;
		udp dport 4791 numgen random mod 100 < 3 counter drop
	}
}
`, "ip", "netns", "exec", c.ns, "nft", "-f", "-")
	}
	var da, db *vroce.Device
	inNetns(t, nsA, func() { da = verbstest.OpenDevice(t, vroce.Config{Provider: "udp", Addr: "10.199.0.1:4791"}) })
	inNetns(t, nsB, func() { db = verbstest.OpenDevice(t, vroce.Config{Provider: "udp", Addr: "10.199.0.2:4791"}) })
	if da.Attr().ActiveMTU != vroce.MTU1024 {
		t.Fatalf("active MTU %d on a 1500-byte veth, want 1024", da.Attr().ActiveMTU)
	}
	o := verbstest.DefaultOpts()
	o.BufSize = 8 << 20
	a, b := verbstest.Pair(t, da, db, o)
	const size = 1 << 20
	deadline := time.Now().Add(60 * time.Second)
	exercise(t, a, b, size)
	if time.Now().After(deadline) {
		t.Fatal("transfer took over a minute")
	}
	st := a.QP.Stats()
	if st.Retransmits == 0 {
		t.Fatalf("no retransmissions: did nftables drop anything? %+v", st)
	}
	out, _ := exec.Command("ip", "netns", "exec", nsB, "nft", "list", "table", "inet", "vroce_loss").CombinedOutput()
	if !strings.Contains(string(out), "packets") || strings.Contains(string(out), "packets 0 ") {
		t.Fatalf("nftables dropped nothing:\n%s", out)
	}
	t.Logf("requester: %d retransmissions, %d fast, %d probes, %d timeouts; nftables: %s", st.Retransmits, st.FastRetransmits, st.TailProbes, st.Timeouts, strings.TrimSpace(string(out)))
}
