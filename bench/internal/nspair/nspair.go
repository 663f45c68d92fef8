package nspair

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// Pair is two namespaces, A and B, joined by a veth pair: A's end has
// AddrA, B's AddrB, both in one /24.
type Pair struct {
	A, B         string // namespace names
	AddrA, AddrB string
	MTU          int
}

// Make creates a pair named after prefix, the process and the MTU, with
// addresses net.1 (A) and net.2 (B); net is three octets ("10.78.0").
// Close removes it.
func Make(prefix, net string, mtu int) (*Pair, error) {
	id := fmt.Sprintf("%d-%d", os.Getpid(), mtu)
	p := &Pair{A: prefix + "-a-" + id, B: prefix + "-b-" + id, AddrA: net + ".1", AddrB: net + ".2", MTU: mtu}
	steps := [][]string{
		{"netns", "add", p.A}, {"netns", "add", p.B},
		{"link", "add", "vpA", "netns", p.A, "type", "veth", "peer", "name", "vpB", "netns", p.B},
		{"-n", p.A, "addr", "add", p.AddrA + "/24", "dev", "vpA"}, {"-n", p.B, "addr", "add", p.AddrB + "/24", "dev", "vpB"},
		{"-n", p.A, "link", "set", "vpA", "mtu", fmt.Sprint(mtu), "up"}, {"-n", p.B, "link", "set", "vpB", "mtu", fmt.Sprint(mtu), "up"},
		{"-n", p.A, "link", "set", "lo", "up"}, {"-n", p.B, "link", "set", "lo", "up"},
	}
	for _, s := range steps {
		if out, err := exec.Command("ip", s...).CombinedOutput(); err != nil {
			p.Close()
			return nil, fmt.Errorf("ip %s: %v: %s", strings.Join(s, " "), err, out)
		}
	}
	// Benchmarks open thousands of TCP connections a minute between the
	// same addresses (a proxy to its server, run after run); a closed
	// one's TIME_WAIT would hold its port for a minute and leave the next
	// run's connects searching a full range. Loopback reuses them by
	// default; the veth's addresses are not loopback.
	for _, ns := range []string{p.A, p.B} {
		if out, err := Command(ns, "sh", "-c", "echo 1 > /proc/sys/net/ipv4/tcp_tw_reuse").CombinedOutput(); err != nil {
			p.Close()
			return nil, fmt.Errorf("sysctl tcp_tw_reuse in %s: %v: %s", ns, err, out)
		}
	}
	return p, nil
}

// Close removes both namespaces (and with them the veth pair).
func (p *Pair) Close() {
	_ = exec.Command("ip", "netns", "del", p.A).Run()
	_ = exec.Command("ip", "netns", "del", p.B).Run()
}

// Command is name with args run inside namespace ns (none: here).
func Command(ns, name string, args ...string) *exec.Cmd {
	if ns == "" {
		return exec.Command(name, args...)
	}
	return exec.Command("ip", append([]string{"netns", "exec", ns, name}, args...)...)
}

// SegmentsOnly sets whether the veth carries one segment per packet, as
// a wire does. A veth passes a UDP GSO burst (up to 64 packets) whole
// from one namespace to the other, so nftables anywhere on the way sees,
// and drops, bursts; with one segment per packet the sender's kernel
// cuts each burst before the veth, and a rule on the receiver's input
// drops datagrams.
func (p *Pair) SegmentsOnly(on bool) error {
	segs := "65535"
	if on {
		segs = "1"
	}
	for _, end := range [][2]string{{p.A, "vpA"}, {p.B, "vpB"}} {
		if out, err := exec.Command("ip", "-n", end[0], "link", "set", end[1], "gso_max_segs", segs).CombinedOutput(); err != nil {
			return fmt.Errorf("ip -n %s link set %s gso_max_segs %s: %v: %s", end[0], end[1], segs, err, out)
		}
	}
	return nil
}

// DropUDP has each namespace drop pct percent of the UDP datagrams it
// receives, at random, one draw per datagram. UDP in a pair's namespaces
// is what a benchmark measures (vRoCE's datagrams, on 4791 or on the
// ports rsock's stacks open), its control on TCP. They are datagrams,
// not GSO bursts, only while the link carries segments (SegmentsOnly).
// With pct 0 the rule draws and drops nothing: a lossless baseline pays
// what the rule costs, as the lossy run does. On veth that cost falls on
// the sender's CPU, where the peer's receive runs: 15-20% of a stream's
// goodput one segment a packet, which a wire's loss does not cost. NoLoss
// removes the rules.
func (p *Pair) DropUDP(pct int) error {
	if pct < 0 || pct > 100 {
		return fmt.Errorf("nspair: dropping %d%% of datagrams", pct)
	}
	if err := p.NoLoss(); err != nil {
		return err
	}
	for _, ns := range []string{p.A, p.B} {
		cmd := Command(ns, "nft", "-f", "-")
		cmd.Stdin = strings.NewReader(lossRules(pct))
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("nft in %s: %v: %s", ns, err, out)
		}
	}
	return nil
}

// NoLoss removes DropUDP's rules from both namespaces. (The table is
// declared first, so that deleting it succeeds whether or not it was
// there, and a failure is a real one.)
func (p *Pair) NoLoss() error {
	for _, ns := range []string{p.A, p.B} {
		cmd := Command(ns, "nft", "-f", "-")
		cmd.Stdin = strings.NewReader(fmt.Sprintf("table inet %[1]s\ndelete table inet %[1]s\n", lossTable))
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("nft in %s: %v: %s", ns, err, out)
		}
	}
	return nil
}

// lossTable is the nftables table DropUDP makes in each namespace.
const lossTable = "vroce_loss"

// lossRules is DropUDP's ruleset. (Until 2026-12-02 the benchmarks
// dropped only datagrams to or from port 4791, with a rule that nft
// merged into "the port pair differs from (4791, 4791): accept", which
// let every datagram through; and streams, on other ports, were never
// touched: every loss figure before then was measured without loss.)
func lossRules(pct int) string {
	return fmt.Sprintf(`table inet %s {
	chain in {
		type filter hook input priority 0;
		meta l4proto udp numgen random mod 100 < %d drop
	}
}
`, lossTable, pct)
}
