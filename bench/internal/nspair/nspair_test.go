package nspair

import (
	"os"
	"os/exec"
	"strings"
	"testing"
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
