package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"vroce.dev/bench/internal/nspair"
)

// link is where a measurement runs: both ends in one process on loopback,
// or (the benchmark of record) two processes in two network namespaces
// joined by a veth pair, the way two hosts see each other.
type link struct {
	name string       // "loopback", "veth1500", "veth9000"
	mtu  int          // of the veth; 0 on loopback
	loss int          // percent of UDP datagrams each namespace drops on the way in (nftables)
	port int          // the next control port
	pair *nspair.Pair // the namespaces: server in A, client in B; nil on loopback
	// provider, when set, is both ends' --provider (the plugin rows).
	provider string
	// pin, when set, is where the ends run (placement.cpus).
	pin *placement
}

// loopbackLink is the secondary view: one process, loopback.
var loopbackLink = &link{name: "loopback"}

// vethLink makes two namespaces joined by a veth pair of the given MTU.
// It needs root and ip; close removes them.
func vethLink(mtu int) (*link, error) {
	p, err := nspair.Make("vroce-page", "10.78.0", mtu)
	if err != nil {
		return nil, err
	}
	return &link{name: fmt.Sprintf("veth%d", mtu), mtu: mtu, port: 19000, pair: p}, nil
}

// setLoss has each namespace drop pct percent of the UDP datagrams it
// receives, at random, with nftables (nspair.Pair.DropUDP: at 0 the rule
// draws and drops none, so that a lossless baseline pays what it costs).
func (l *link) setLoss(pct int) error {
	if err := l.pair.DropUDP(pct); err != nil {
		return err
	}
	l.loss = pct
	return nil
}

// noLoss removes the loss rules.
func (l *link) noLoss() error {
	l.loss = 0
	return l.pair.NoLoss()
}

func (l *link) close() {
	if l.pair != nil {
		l.pair.Close()
	}
}

// run runs one vroce-perf measurement over the link, with kernel TCP in
// the same run (--compare tcp), and returns its result lines.
func (l *link) run(perf string, test string, args []string) ([]point, error) {
	if l.pair == nil {
		return runTool(exec.Command(perf, append([]string{test, "--loopback", "--compare", "tcp", "--json"}, args...)...))
	}
	l.port++
	port := fmt.Sprint(l.port)
	var prov []string
	if l.provider != "" {
		prov = []string{"--provider", l.provider}
	}
	server := l.command(l.pair.A, 0, perf, append([]string{test, "--port", port, "--json"}, prov...)...)
	server.Stdout, server.Stderr = nil, os.Stderr
	if err := server.Start(); err != nil {
		return nil, err
	}
	defer server.Wait()
	client := append(append([]string{test, "--port", port, "--compare", "tcp", "--json"}, prov...), args...)
	client = append(client, l.pair.AddrA)
	for try := 0; ; try++ {
		pts, err := runTool(l.command(l.pair.B, 1, perf, client...))
		if err == nil || try == 50 {
			if err != nil {
				server.Process.Kill()
			}
			return pts, err
		}
		time.Sleep(100 * time.Millisecond) // the server is not listening yet
	}
}

// pinned runs f with the link's ends placed by p (nil: unpinned).
func (l *link) pinned(p *placement, f func() error) error {
	l.pin = p
	defer func() { l.pin = nil }()
	return f()
}

// title names the link and, when pinned, its placement.
func (l *link) title() string {
	if l.pin == nil {
		return l.name
	}
	return l.name + " (" + l.pin.name + ")"
}

// command is perf with args in namespace ns, on the CPU the link's
// placement gives end (0 the server, 1 the client), if it gives one.
func (l *link) command(ns string, end int, perf string, args ...string) *exec.Cmd {
	if l.pin == nil {
		return nspair.Command(ns, perf, args...)
	}
	return nspair.Pinned(l.pin.cpus[end], ns, perf, args...)
}

// runTool runs a measuring command and parses its JSON result lines.
func runTool(cmd *exec.Cmd) ([]point, error) {
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s: %v: %s", strings.Join(cmd.Args, " "), err, stderr.Bytes())
	}
	os.Stderr.Write(stderr.Bytes())
	var pts []point
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		var p point
		if json.Unmarshal(sc.Bytes(), &p) == nil && p.Test != "" {
			pts = append(pts, p)
		}
	}
	return pts, nil
}
