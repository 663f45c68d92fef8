//go:build linux

package rxe

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"vroce.dev/internal/pcap"
	"vroce.dev/internal/testkit/netnstest"
)

// The guest: one qemu (TCG: no KVM here) running Debian's kernel with
// rdma_rxe, on a tap in a network namespace of the test's own. The host
// end of the tap is the namespace's only link, so nothing the tests send
// leaves it.
const (
	guestIP   = "10.0.0.1"
	hostIP    = "10.0.0.2"
	guestMAC  = "52:54:00:12:34:01"
	hostMAC   = "52:54:00:12:34:02"
	hostLL    = "fe80::5054:ff:fe12:3402" // the tap's link-local address, from hostMAC
	guestPort = 7000                      // the guest's command port (init)
	// bootWait bounds the boot under TCG (about 20 s on two cores).
	bootWait = 240 * time.Second
)

// guest is the booted Soft-RoCE machine and the namespace it is reached in.
type guest struct {
	ns, tap string
	dir     string // logs and captures, kept for a failed run
	perf    string // the vroce-perf binary built for the run
	qemu    *exec.Cmd
	exited  chan struct{} // closed when qemu ends
	console *lockedBuffer
}

// lockedBuffer collects a process's output while tests read it, and
// closes seen once the output holds marker (if one is set).
type lockedBuffer struct {
	mu     sync.Mutex
	b      bytes.Buffer
	marker string
	seen   chan struct{}
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, err := l.b.Write(p)
	if l.marker != "" && bytes.Contains(l.b.Bytes(), []byte(l.marker)) {
		close(l.seen)
		l.marker = ""
	}
	return n, err
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// missing says what this machine lacks to boot the guest, or "".
func missing() string {
	if os.Geteuid() != 0 {
		return "root (a network namespace and a tap device)"
	}
	for _, tool := range []string{"qemu-system-x86_64", "ip", "cpio", "depmod", "busybox", "apt-get", "dpkg"} {
		if _, err := exec.LookPath(tool); err != nil {
			return tool + " (apt-get install qemu-system-x86 iproute2 cpio kmod busybox-static)"
		}
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		return "/dev/net/tun"
	}
	return ""
}

// guestDir is where build.sh keeps the guest between runs.
func guestDir() string {
	if d := os.Getenv("VROCE_RXE_GUEST"); d != "" {
		return d
	}
	return "/var/tmp/vroce-rxe-guest"
}

// recipe is a digest of what the guest is built from: a guest built from
// another version of guest/ is built again.
func recipe() (string, error) {
	h := sha256.New()
	for _, f := range []string{"build.sh", "init", "run-one"} {
		b, err := os.ReadFile(filepath.Join("guest", f))
		if err != nil {
			return "", err
		}
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// boot builds the guest if needed, and vroce-perf, and starts qemu.
func boot(dir string, mtu int) (*guest, error) {
	out := guestDir()
	want, err := recipe()
	if err != nil {
		return nil, err
	}
	stamp := filepath.Join(out, "recipe")
	if have, err := os.ReadFile(stamp); err != nil || string(have) != want || os.Getenv("VROCE_RXE_REBUILD") != "" {
		build := exec.Command("bash", "guest/build.sh")
		build.Env = append(os.Environ(), "OUT="+out)
		if b, err := build.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("building the guest: %v\n%s", err, b)
		}
		if err := os.WriteFile(stamp, []byte(want), 0o644); err != nil {
			return nil, err
		}
	}
	g := &guest{ns: fmt.Sprintf("vroce-rxe-%d", os.Getpid()), tap: "vrxetap0", dir: dir, console: &lockedBuffer{marker: "VROCE-GUEST-READY", seen: make(chan struct{})}}
	g.perf = filepath.Join(dir, "vroce-perf")
	if b, err := exec.Command("go", "build", "-o", g.perf, "vroce.dev/cmd/vroce-perf").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building vroce-perf: %v\n%s", err, b)
	}
	steps := [][]string{
		{"ip", "netns", "add", g.ns},
		// The tap's link-local address (from its MAC) is the host's GID
		// for -g 0: no duplicate detection to wait for on a link of two.
		{"ip", "netns", "exec", g.ns, "sysctl", "-qw", "net.ipv6.conf.default.accept_dad=0"},
		{"ip", "-n", g.ns, "link", "set", "lo", "up"},
		{"ip", "-n", g.ns, "tuntap", "add", "dev", g.tap, "mode", "tap"},
		{"ip", "-n", g.ns, "link", "set", g.tap, "address", hostMAC, "mtu", strconv.Itoa(mtu)},
		{"ip", "-n", g.ns, "addr", "add", hostIP + "/24", "dev", g.tap},
		{"ip", "-n", g.ns, "link", "set", g.tap, "up"},
	}
	for _, s := range steps {
		if b, err := exec.Command(s[0], s[1:]...).CombinedOutput(); err != nil {
			g.close()
			return nil, fmt.Errorf("%s: %v\n%s", strings.Join(s, " "), err, b)
		}
	}
	kargs := fmt.Sprintf("console=ttyS0 quiet panic=-1 vroce.ip=%s/24 vroce.mtu=%d", guestIP, mtu)
	g.qemu = exec.Command("ip", "netns", "exec", g.ns, "qemu-system-x86_64",
		"-accel", "tcg", "-m", "1024", "-smp", "1", "-nographic", "-no-reboot",
		"-kernel", filepath.Join(out, "vmlinuz"), "-initrd", filepath.Join(out, "initramfs.cpio.gz"), "-append", kargs,
		"-netdev", "tap,id=n0,ifname="+g.tap+",script=no,downscript=no,vnet_hdr=off",
		"-device", "virtio-net-pci,netdev=n0,mac="+guestMAC,
		"-object", "filter-dump,id=f0,netdev=n0,file="+g.capturePath())
	g.qemu.Stdout, g.qemu.Stderr = g.console, g.console
	if err := g.qemu.Start(); err != nil {
		g.qemu = nil
		g.close()
		return nil, err
	}
	g.exited = make(chan struct{})
	go func() { g.qemu.Wait(); close(g.exited) }()
	select {
	case <-g.console.seen:
		return g, nil
	case <-time.After(bootWait):
	case <-g.exited:
	}
	g.close()
	return nil, fmt.Errorf("the guest did not come up in %v:\n%s", bootWait, g.console.String())
}

func (g *guest) close() {
	if g.qemu != nil {
		g.qemu.Process.Kill()
		<-g.exited
	}
	exec.Command("ip", "netns", "del", g.ns).Run()
	os.WriteFile(filepath.Join(g.dir, "console.log"), []byte(g.console.String()), 0o644)
}

// remote is a command running in the guest.
type remote struct {
	out  lockedBuffer
	done chan struct{}
	rc   int // after done; -1 when the connection ended without a status
	conn net.Conn
	// kill ends the command in the guest (its tool, by name), so that a
	// command that overran its time leaves no server on a port the next
	// case needs; nil for the kill itself.
	kill func()
}

// start runs a command line in the guest; its output streams back.
func (g *guest) start(t *testing.T, line string) *remote {
	t.Helper()
	var c net.Conn
	var err error
	netnstest.In(t, g.ns, func() {
		c, err = net.DialTimeout("tcp", net.JoinHostPort(guestIP, strconv.Itoa(guestPort)), 10*time.Second)
	})
	if err != nil {
		t.Fatalf("guest command port: %v", err)
	}
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		t.Fatal(err)
	}
	r := &remote{done: make(chan struct{}), rc: -1, conn: c}
	if tool, _, _ := strings.Cut(line, " "); !strings.HasPrefix(line, "killall ") {
		r.kill = func() {
			k := g.start(t, "killall -9 "+tool)
			k.wait(t, 10*time.Second)
		}
	}
	go func() {
		defer close(r.done)
		defer c.Close()
		sc := bufio.NewScanner(c)
		for sc.Scan() {
			l := sc.Text()
			if s, ok := strings.CutPrefix(l, "VROCE-RC="); ok {
				r.rc, _ = strconv.Atoi(s)
				continue
			}
			fmt.Fprintln(&r.out, l)
		}
	}()
	return r
}

// wait waits for the command to end and returns its status and output.
func (r *remote) wait(t *testing.T, within time.Duration) (int, string) {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(within):
		r.conn.Close()
		<-r.done
		t.Errorf("guest command still running after %v", within)
		if r.kill != nil {
			r.kill()
		}
	}
	return r.rc, r.out.String()
}

// sh runs a short command in the guest and returns its output; it must
// succeed.
func (g *guest) sh(t *testing.T, line string) string {
	t.Helper()
	rc, out := g.start(t, line).wait(t, 60*time.Second)
	if rc != 0 {
		t.Fatalf("guest: %s: status %d\n%s", line, rc, out)
	}
	return out
}

// waitListening waits until a guest program listens on TCP port (the
// out-of-band exchanges) or, for port 0, an rdma_cm ID does.
func (g *guest) waitListening(t *testing.T, port int) {
	t.Helper()
	check := fmt.Sprintf(`cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | awk '$4 == "0A" && $2 ~ /:%04X$/' | grep -q .`, port)
	if port == 0 {
		check = `rdma res show cm_id 2>/dev/null | grep -q 'state LISTEN'`
	}
	g.sh(t, fmt.Sprintf("i=0; until %s; do i=$((i+1)); [ $i -gt 600 ] && exit 1; sleep 0.1; done", check))
}

// counters reads rxe0's hardware counters.
func (g *guest) counters(t *testing.T) map[string]int {
	t.Helper()
	out := g.sh(t, `cd /sys/class/infiniband/rxe0/ports/1/hw_counters && for c in *; do echo "$c $(cat $c)"; done`)
	m := map[string]int{}
	for _, l := range strings.Split(out, "\n") {
		var name string
		var v int
		if _, err := fmt.Sscan(l, &name, &v); err == nil {
			m[name] = v
		}
	}
	return m
}

// captureSize is how much of the guest's capture qemu has written.
func (g *guest) captureSize(t *testing.T) int64 {
	t.Helper()
	fi, err := os.Stat(g.capturePath())
	if err != nil {
		t.Fatalf("the guest's capture: %v", err)
	}
	return fi.Size()
}

func (g *guest) capturePath() string { return filepath.Join(g.dir, "guest.pcap") }

// judgeRetriesSince judges rxe's retries in the frames qemu captured from
// offset mark on (captureSize, taken between the case's frames). qemu
// writes each frame with one writev; should a read from the mark still
// fail (a size taken as one was being written, or a frame met half
// written), the whole capture is read from its start instead.
func (g *guest) judgeRetriesSince(mark int64) (retryVerdict, error) {
	dgs, err := pcap.ReadUDPFrom(g.capturePath(), mark)
	if err != nil {
		dgs, err = pcap.ReadUDP(g.capturePath())
		i := sort.Search(len(dgs), func(i int) bool { return dgs[i].Offset >= mark })
		dgs = dgs[i:]
	}
	if err != nil {
		return retryVerdict{}, err
	}
	mac, err := net.ParseMAC(guestMAC)
	if err != nil {
		return retryVerdict{}, err
	}
	return judgeRetries(dgs, mac), nil
}

// host runs vroce-perf in the namespace, with the device on the tap.
func (g *guest) host(ctx context.Context, args ...string) *exec.Cmd {
	argv := append([]string{"netns", "exec", g.ns, g.perf}, args...)
	return exec.CommandContext(ctx, "ip", argv...)
}
