//go:build linux

package rxe

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// theGuest is booted once for the package: under TCG a boot costs about
// 20 s, a case a few.
var (
	theGuest *guest
	bootErr  error
	lacking  string
)

func TestMain(m *testing.M) {
	lacking = missing()
	var dir string
	if lacking == "" {
		var err error
		dir, err = os.MkdirTemp("", "vroce-rxe-")
		if err == nil {
			theGuest, bootErr = boot(dir, 1500)
		} else {
			bootErr = err
		}
	}
	code := m.Run()
	if theGuest != nil {
		theGuest.close()
	}
	if code == 0 && dir != "" {
		os.RemoveAll(dir)
	} else if dir != "" {
		fmt.Fprintf(os.Stderr, "interop/rxe: console log and capture kept in %s\n", dir)
	}
	os.Exit(code)
}

// needGuest skips a test where the guest cannot be booted, saying why;
// CI, which installs qemu and runs as root, must run it.
func needGuest(t *testing.T) *guest {
	t.Helper()
	switch {
	case lacking != "" && os.Getenv("CI") != "":
		t.Fatalf("CI must run the rdma_rxe interop tests, but this machine lacks %s", lacking)
	case lacking != "":
		t.Skipf("needs %s to boot a Soft-RoCE guest; CI runs it", lacking)
	case bootErr != nil:
		t.Fatalf("booting the Soft-RoCE guest: %v", bootErr)
	}
	return theGuest
}

// hostServer starts vroce-perf as a server in the namespace and waits
// until it listens.
func hostServer(t *testing.T, g *guest, args ...string) (wait func() string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	cmd := g.host(ctx, args...)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	var out strings.Builder
	cmd.Stdout = &out
	require.NoError(t, cmd.Start())
	listening := make(chan struct{})
	var errOut strings.Builder
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			fmt.Fprintln(&errOut, sc.Text())
			if strings.Contains(sc.Text(), "server waiting on") {
				close(listening)
			}
		}
	}()
	select {
	case <-listening:
	case <-ctx.Done():
		t.Fatalf("vroce-perf %v did not listen", args)
	}
	return func() string {
		t.Helper()
		err := cmd.Wait()
		cancel()
		if err != nil {
			t.Errorf("vroce-perf %v: %v\n%s%s", args, err, out.String(), errOut.String())
		}
		return out.String()
	}
}

// hostClient runs vroce-perf as a client in the namespace.
func hostClient(t *testing.T, g *guest, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	out, err := g.host(ctx, args...).CombinedOutput()
	if err != nil {
		t.Errorf("vroce-perf %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// delta is what rxe's counters moved by.
func delta(before, after map[string]int) map[string]int {
	d := map[string]int{}
	for k, v := range after {
		if v != before[k] {
			d[k] = v - before[k]
		}
	}
	return d
}

// checkRxe says whether rxe saw what a clean exchange of sends and
// receives makes: every packet it got in order, nothing retried to
// exhaustion.
func checkRxe(t *testing.T, d map[string]int, sends, recvs int) {
	t.Helper()
	assert.Equal(t, sends, d["rdma_sends"], "rxe counted SENDs (counters moved: %v)", d)
	assert.Equal(t, recvs, d["rdma_recvs"], "rxe counted receives (counters moved: %v)", d)
	for _, bad := range []string{"completer_retry_err", "retry_exceeded_err", "rnr_nak_retry_err", "send_err", "link_downed"} {
		assert.Zero(t, d[bad], "rxe %s (counters moved: %v)", bad, d)
	}
}

var devAddr = "--dev-addr=" + hostIP + ":4791"

// TestRCPingpong: ibv_rc_pingpong in the guest, vroce-perf on the host,
// each as server and as client, at the tools' 4096 bytes (FIRST, MIDDLE,
// LAST at the 1024-byte MTU) and at 13 (one padded packet).
func TestRCPingpong(t *testing.T) {
	g := needGuest(t)
	for _, size := range []int{4096, 13} {
		t.Run(fmt.Sprintf("guest serves %d B", size), func(t *testing.T) {
			before := g.counters(t)
			srv := g.start(t, fmt.Sprintf("ibv_rc_pingpong -g 1 -n 10 -s %d", size))
			g.waitListening(t, 18515)
			out := hostClient(t, g, "send_lat", "--oob", "pingpong", "-n", "10", "-s", fmt.Sprint(size), devAddr, guestIP)
			rc, gout := srv.wait(t, 60*time.Second)
			require.Equal(t, 0, rc, "ibv_rc_pingpong:\n%s\nvroce-perf:\n%s", gout, out)
			assert.Contains(t, gout, "10 iters in")
			checkRxe(t, delta(before, g.counters(t)), 10, 10)
		})
		t.Run(fmt.Sprintf("guest connects %d B", size), func(t *testing.T) {
			before := g.counters(t)
			wait := hostServer(t, g, "send_lat", "--oob", "pingpong", "-n", "10", "-s", fmt.Sprint(size), devAddr)
			rc, gout := g.start(t, fmt.Sprintf("ibv_rc_pingpong -g 1 -n 10 -s %d %s", size, hostIP)).wait(t, 60*time.Second)
			out := wait()
			require.Equal(t, 0, rc, "ibv_rc_pingpong:\n%s\nvroce-perf:\n%s", gout, out)
			assert.Contains(t, out, "10 iters in")
			checkRxe(t, delta(before, g.counters(t)), 10, 10)
		})
	}
}

// TestRCPingpongMTU4096: with both links at MTU 9000, rxe's port takes
// a 4096-byte path MTU: ibv_rc_pingpong -m 4096 and 8 KiB messages (FIRST
// and LAST of 4096 bytes each).
func TestRCPingpongMTU4096(t *testing.T) {
	g := needGuest(t)
	setMTU := func(mtu int) {
		g.sh(t, fmt.Sprintf("ip link set eth0 mtu %d", mtu))
		if b, err := exec.Command("ip", "-n", g.ns, "link", "set", g.tap, "mtu", fmt.Sprint(mtu)).CombinedOutput(); err != nil {
			t.Fatalf("tap MTU %d: %v\n%s", mtu, err, b)
		}
	}
	setMTU(9000)
	t.Cleanup(func() { setMTU(1500) })
	t.Run("guest serves", func(t *testing.T) {
		srv := g.start(t, "ibv_rc_pingpong -g 1 -m 4096 -s 8192 -n 5")
		g.waitListening(t, 18515)
		out := hostClient(t, g, "send_lat", "--oob", "pingpong", "--mtu", "4096", "-s", "8192", "-n", "5", devAddr, guestIP)
		rc, gout := srv.wait(t, 60*time.Second)
		require.Equal(t, 0, rc, "ibv_rc_pingpong:\n%s\nvroce-perf:\n%s", gout, out)
	})
	t.Run("guest connects", func(t *testing.T) {
		wait := hostServer(t, g, "send_lat", "--oob", "pingpong", "--mtu", "4096", "-s", "8192", "-n", "5", devAddr)
		rc, gout := g.start(t, "ibv_rc_pingpong -g 1 -m 4096 -s 8192 -n 5 "+hostIP).wait(t, 60*time.Second)
		out := wait()
		require.Equal(t, 0, rc, "ibv_rc_pingpong:\n%s\nvroce-perf:\n%s", gout, out)
	})
}

// TestRCPingpongIPv6: the same over RoCEv2 on IPv6 (-g 0, the link-local
// GIDs): rxe sends UDP checksum 0, which the udp provider takes
// (UDP_NO_CHECK6_RX), and IPv6 has no ID for the ICRC to cover.
func TestRCPingpongIPv6(t *testing.T) {
	g := needGuest(t)
	dev6 := "--dev-addr=[" + hostLL + "%" + g.tap + "]:4791"
	// rxe resolves a GID's link-layer address through the neighbour
	// table and fails the QP's move to RTR while it is unresolved.
	g.sh(t, "i=0; until ping6 -c 1 -W 1 "+hostLL+"%eth0 >/dev/null; do i=$((i+1)); [ $i -gt 20 ] && exit 1; sleep 0.2; done")
	t.Run("guest serves", func(t *testing.T) {
		before := g.counters(t)
		srv := g.start(t, "ibv_rc_pingpong -g 0 -n 10")
		g.waitListening(t, 18515)
		out := hostClient(t, g, "send_lat", "--oob", "pingpong", "-n", "10", dev6, guestIP)
		rc, gout := srv.wait(t, 60*time.Second)
		require.Equal(t, 0, rc, "ibv_rc_pingpong:\n%s\nvroce-perf:\n%s", gout, out)
		checkRxe(t, delta(before, g.counters(t)), 10, 10)
	})
	t.Run("guest connects", func(t *testing.T) {
		before := g.counters(t)
		wait := hostServer(t, g, "send_lat", "--oob", "pingpong", "-n", "10", dev6)
		rc, gout := g.start(t, "ibv_rc_pingpong -g 0 -n 10 "+hostIP).wait(t, 60*time.Second)
		out := wait()
		require.Equal(t, 0, rc, "ibv_rc_pingpong:\n%s\nvroce-perf:\n%s", gout, out)
		checkRxe(t, delta(before, g.counters(t)), 10, 10)
	})
}

// TestUDPingpong: ibv_ud_pingpong, whose datagrams rxe sends from a port
// hashed from its QPN and with counting IPv4 IDs.
func TestUDPingpong(t *testing.T) {
	g := needGuest(t)
	t.Run("guest serves", func(t *testing.T) {
		srv := g.start(t, "ibv_ud_pingpong -g 1 -n 10 -s 512")
		g.waitListening(t, 18515)
		out := hostClient(t, g, "send_lat", "--oob", "pingpong", "--conn", "UD", "-n", "10", "-s", "512", devAddr, guestIP)
		rc, gout := srv.wait(t, 60*time.Second)
		require.Equal(t, 0, rc, "ibv_ud_pingpong:\n%s\nvroce-perf:\n%s", gout, out)
	})
	t.Run("guest connects", func(t *testing.T) {
		wait := hostServer(t, g, "send_lat", "--oob", "pingpong", "--conn", "UD", "-n", "10", "-s", "512", devAddr)
		rc, gout := g.start(t, "ibv_ud_pingpong -g 1 -n 10 -s 512 "+hostIP).wait(t, 60*time.Second)
		out := wait()
		require.Equal(t, 0, rc, "ibv_ud_pingpong:\n%s\nvroce-perf:\n%s", gout, out)
	})
}

// TestPerftest: ib_write_bw, ib_read_bw and ib_send_bw in the guest against
// vroce-perf --oob perftest, each end as server and as client: perftest's
// TCP exchange, then 8 KiB WRITEs or READs (eight packets each at the
// 1024-byte MTU; READ responses carry the data back).
func TestPerftest(t *testing.T) {
	g := needGuest(t)
	for _, test := range []string{"write_bw", "read_bw", "send_bw"} {
		tool := "ib_" + test
		t.Run(test+" guest serves", func(t *testing.T) {
			srv := g.start(t, tool+" -x 1 -n 50 -s 8192")
			g.waitListening(t, 18515)
			out := hostClient(t, g, test, "--oob", "perftest", "-n", "50", "-s", "8192", devAddr, guestIP)
			rc, gout := srv.wait(t, 60*time.Second)
			require.Equal(t, 0, rc, "%s:\n%s\nvroce-perf:\n%s", tool, gout, out)
			assert.Contains(t, out, "8192       50")
		})
		t.Run(test+" guest connects", func(t *testing.T) {
			wait := hostServer(t, g, test, "--oob", "perftest", "-n", "50", "-s", "8192", devAddr)
			rc, gout := g.start(t, fmt.Sprintf("%s -x 1 -n 50 -s 8192 %s", tool, hostIP)).wait(t, 60*time.Second)
			out := wait()
			require.Equal(t, 0, rc, "%s:\n%s\nvroce-perf:\n%s", tool, gout, out)
			assert.Contains(t, gout, " 8192       50")
		})
	}
}

// TestPerftestRDMACM: perftest's -R, no TCP: the exchange as SENDs on a
// control QP and the test QP, both connected through RDMA_CM (vroce/cm
// against Linux's CM, twice per run).
func TestPerftestRDMACM(t *testing.T) {
	g := needGuest(t)
	for _, test := range []string{"write_bw", "read_bw", "send_lat"} {
		tool := "ib_" + test
		t.Run(test+" guest serves", func(t *testing.T) {
			srv := g.start(t, tool+" -R -n 20 -s 4096")
			g.waitListening(t, 0)
			out := hostClient(t, g, test, "--oob", "perftest", "-R", "-n", "20", "-s", "4096", devAddr, guestIP)
			rc, gout := srv.wait(t, 60*time.Second)
			require.Equal(t, 0, rc, "%s -R:\n%s\nvroce-perf:\n%s", tool, gout, out)
		})
		t.Run(test+" guest connects", func(t *testing.T) {
			wait := hostServer(t, g, test, "--oob", "perftest", "-R", "-n", "20", "-s", "4096", devAddr)
			rc, gout := g.start(t, fmt.Sprintf("%s -R -n 20 -s 4096 %s", tool, hostIP)).wait(t, 60*time.Second)
			out := wait()
			require.Equal(t, 0, rc, "%s -R:\n%s\nvroce-perf:\n%s", tool, gout, out)
		})
	}
}

// TestPerftestSendLat: ib_send_lat's ping-pong of padded 13-byte SENDs.
func TestPerftestSendLat(t *testing.T) {
	g := needGuest(t)
	t.Run("guest serves", func(t *testing.T) {
		srv := g.start(t, "ib_send_lat -x 1 -n 20 -s 13")
		g.waitListening(t, 18515)
		out := hostClient(t, g, "send_lat", "--oob", "perftest", "-n", "20", "-s", "13", devAddr, guestIP)
		rc, gout := srv.wait(t, 60*time.Second)
		require.Equal(t, 0, rc, "ib_send_lat:\n%s\nvroce-perf:\n%s", gout, out)
		assert.Contains(t, out, "20 iters in")
	})
	t.Run("guest connects", func(t *testing.T) {
		wait := hostServer(t, g, "send_lat", "--oob", "perftest", "-n", "20", "-s", "13", devAddr)
		rc, gout := g.start(t, "ib_send_lat -x 1 -n 20 -s 13 "+hostIP).wait(t, 60*time.Second)
		out := wait()
		require.Equal(t, 0, rc, "ib_send_lat:\n%s\nvroce-perf:\n%s", gout, out)
		assert.Contains(t, gout, " 13 ")
	})
}

// TestRping: librdmacm's rping in the guest against vroce-perf rping,
// connected by RDMA_CM (vroce/cm against Linux's CM: REQ, REP, RTU, DREQ,
// DREP on QP1), each end as server and as client; the client checks
// every echo (-V), and vroce-perf's server checks what it read.
func TestRping(t *testing.T) {
	g := needGuest(t)
	t.Run("guest serves", func(t *testing.T) {
		srv := g.start(t, "rping -s -a "+guestIP+" -C 5 -S 64 -V")
		g.waitListening(t, 0)
		out := hostClient(t, g, "rping", "-n", "5", "-s", "64", devAddr, guestIP)
		rc, gout := srv.wait(t, 60*time.Second)
		require.Equal(t, 0, rc, "rping:\n%s\nvroce-perf:\n%s", gout, out)
		assert.Contains(t, out, "5 pings of 64 bytes")
	})
	t.Run("guest connects", func(t *testing.T) {
		wait := hostServer(t, g, "rping", "-n", "5", "-s", "64", devAddr)
		rc, gout := g.start(t, "rping -c -a "+hostIP+" -C 5 -S 64 -V -v").wait(t, 60*time.Second)
		out := wait()
		require.Equal(t, 0, rc, "rping:\n%s\nvroce-perf:\n%s", gout, out)
		assert.Contains(t, gout, "ping data: rdma-ping-4: ")
	})
}
