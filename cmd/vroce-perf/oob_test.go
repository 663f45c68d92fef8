package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vroce.dev/vroce"
)

// TestPingpongDestIsTheToolsFormat: the address message as
// ibv_rc_pingpong writes it (from the rxe reference captures), read and
// written back byte for byte.
func TestPingpongDestIsTheToolsFormat(t *testing.T) {
	for _, msg := range []string{
		"0000:000011:58d135:00000000000000000000ffff0a000002\x00",
		"0000:000011:eecd4b:fe80000000000000505400fffe123401\x00",
	} {
		d, err := parsePPDest([]byte(msg))
		require.NoError(t, err)
		assert.Equal(t, uint32(0x11), d.qpn)
		assert.Equal(t, msg, string(d.marshal()))
	}
	d, _ := parsePPDest([]byte("0000:000011:58d135:00000000000000000000ffff0a000002\x00"))
	assert.Equal(t, "10.0.0.2", d.addr().String())
	for _, bad := range []string{"", "done\x00", "0000:000011:58d135:00000000000000000000ffff0a00000g\x00", "0000-000011:58d135:00000000000000000000ffff0a000002\x00"} {
		_, err := parsePPDest([]byte(bad))
		assert.ErrorIs(t, err, errPPDest, "%q", bad)
	}
}

// TestPerftestKeysAreTheToolsFormat: perftest's 108-byte record, as
// KEY_PRINT_FMT_GID lays it out, read and written back.
func TestPerftestKeysAreTheToolsFormat(t *testing.T) {
	msg := "0000:0080:000011:6fd4f2:00000236:000056182f335000:00:00:00:00:00:00:00:00:00:00:ff:ff:0a:00:00:01:00000000:"
	b := append([]byte(msg), make([]byte, pfKeysLen-len(msg))...)
	k, err := parsePFKeys(b)
	require.NoError(t, err)
	assert.Equal(t, pfKeys{outReads: 0x80, qpn: 0x11, psn: 0x6fd4f2, rkey: 0x236, vaddr: 0x56182f335000,
		gid: [16]byte{10: 0xff, 11: 0xff, 12: 10, 15: 1}}, k)
	assert.Equal(t, b, k.marshal())
	for _, bad := range []string{msg[:50], strings.Replace(msg, "0080", "80", 1), strings.Replace(msg, "6fd4f2", "6fd4fz", 1)} {
		_, err := parsePFKeys(append([]byte(bad), make([]byte, max(0, pfKeysLen-len(bad)))...))
		assert.ErrorIs(t, err, errPFKeys, "%q", bad)
	}
}

func FuzzParsePingpongDest(f *testing.F) {
	f.Add([]byte("0000:000011:58d135:00000000000000000000ffff0a000002\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := parsePPDest(b)
		if err == nil && string(d.marshal()) != strings.ToLower(string(b)) {
			t.Fatalf("%q parses but writes back as %q", b, d.marshal())
		}
	})
}

func FuzzParsePerftestKeys(f *testing.F) {
	msg := "0000:0080:000011:6fd4f2:00000236:000056182f335000:00:00:00:00:00:00:00:00:00:00:ff:ff:0a:00:00:01:00000000:"
	f.Add(append([]byte(msg), make([]byte, pfKeysLen-len(msg))...))
	f.Fuzz(func(t *testing.T, b []byte) {
		k, err := parsePFKeys(b)
		if err != nil {
			return
		}
		again, err := parsePFKeys(k.marshal())
		if err != nil || again != k {
			t.Fatalf("%q parses as %+v, which writes back as %q", b, k, k.marshal())
		}
	})
}

// FuzzParsePerftestDest: perftest's binary record (-R) is read only at
// its own length, and what it keeps writes back and reads again the same.
func FuzzParsePerftestDest(f *testing.F) {
	k := pfKeys{outReads: 0x80, qpn: 0x11, psn: 0x6fd4f2, rkey: 0x236, vaddr: 0x56182f335000,
		gid: [16]byte{10: 0xff, 11: 0xff, 12: 10, 15: 1}, srqn: 7}
	f.Add(k.marshalBinary())
	f.Add(make([]byte, pfDestLen-1))
	f.Fuzz(func(t *testing.T, b []byte) {
		k, err := parsePFDest(b)
		if err != nil {
			if len(b) == pfDestLen {
				t.Fatalf("a record of %d bytes refused: %v", len(b), err)
			}
			return
		}
		again, err := parsePFDest(k.marshalBinary())
		if err != nil || again != k {
			t.Fatalf("%x parses as %+v, which writes back as %x", b, k, k.marshalBinary())
		}
	})
}

// freePort is a TCP port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestOOBBetweenTwoEnds runs both ends of each foreign exchange in this
// process, over the udp provider on two loopback addresses: vroce-perf
// against itself (interop/rxe runs them against rdma-core's tools).
func TestOOBBetweenTwoEnds(t *testing.T) {
	cases := []struct {
		name string
		cfg  config
		run  func(*config) error
	}{
		{"rc pingpong", config{params: params{Test: "send_lat", Iters: 20}, Oob: "pingpong"}, runPingpong},
		{"ud pingpong", config{params: params{Test: "send_lat", Size: 512, Iters: 20}, Oob: "pingpong", Conn: "UD"}, runPingpong},
		// 16 QPs on one SRQ each end; every receive names its QP.
		{"srq pingpong", config{params: params{Test: "send_lat", Size: 4096, Iters: 200}, Oob: "pingpong", SRQ: true}, runSRQPingpong},
		{"perftest write_bw", config{params: params{Test: "write_bw", Size: 8192, Iters: 50}, Oob: "perftest"}, runPerftest},
		{"perftest read_bw", config{params: params{Test: "read_bw", Size: 8192, Iters: 50}, Oob: "perftest"}, runPerftest},
		{"perftest send_bw", config{params: params{Test: "send_bw", Size: 4096, Iters: 700}, Oob: "perftest"}, runPerftest},
		{"perftest send_lat", config{params: params{Test: "send_lat", Size: 13, Iters: 50}, Oob: "perftest"}, runPerftest},
		// ib_write_lat: each end spins on its memory for the other's
		// count; a 4 KiB message crosses as several packets.
		{"perftest write_lat", config{params: params{Test: "write_lat", Size: 2, Iters: 300}, Oob: "perftest"}, runPerftest},
		{"perftest write_lat 4 KiB", config{params: params{Test: "write_lat", Size: 4096, Iters: 50}, Oob: "perftest"}, runPerftest},
		{"perftest read_lat", config{params: params{Test: "read_lat", Size: 64, Iters: 50}, Oob: "perftest"}, runPerftest},
		// The client checks each fetch brings back one more than the
		// last; the server that its memory grew by every add, once.
		{"perftest atomic_bw", config{params: params{Test: "atomic_bw", Iters: 300}, Oob: "perftest"}, runPerftest},
		{"perftest atomic_lat", config{params: params{Test: "atomic_lat", Iters: 50}, Oob: "perftest"}, runPerftest},
		// perftest's -q: every QP's record in turn, then each QP moves -n.
		{"perftest write_bw -q 4", config{params: params{Test: "write_bw", Size: 8192, Iters: 50, QPs: 4}, Oob: "perftest"}, runPerftest},
		{"perftest send_bw -q 3", config{params: params{Test: "send_bw", Size: 4096, Iters: 300, QPs: 3}, Oob: "perftest"}, runPerftest},
		{"perftest atomic_bw -q 2", config{params: params{Test: "atomic_bw", Iters: 100, QPs: 2}, Oob: "perftest"}, runPerftest},
		// perftest's -D: the client runs by time, the server is passive.
		{"perftest write_bw -D 1", config{params: params{Test: "write_bw", Size: 8192, Iters: 50}, Oob: "perftest", RunFor: 1}, runPerftest},
		// perftest's -b: both ends move -n at once.
		{"perftest write_bw -b", config{params: params{Test: "write_bw", Size: 8192, Iters: 300}, Oob: "perftest", Duplex: true}, runPerftest},
		{"perftest read_bw -b -q 2", config{params: params{Test: "read_bw", Size: 8192, Iters: 300, QPs: 2}, Oob: "perftest", Duplex: true}, runPerftest},
		// -a -b: each size in turn, both ends moving it, synced around it.
		{"perftest write_bw -a -b", config{params: params{Test: "write_bw", Iters: 3}, Oob: "perftest", Duplex: true, AllSizes: true}, runPerftest},
		// send_bw -b: each end posts its receives, sends and receives.
		{"perftest send_bw -b -q 2", config{params: params{Test: "send_bw", Size: 8192, Iters: 300, QPs: 2}, Oob: "perftest", Duplex: true}, runPerftest},
		// perftest's -a: every size from 2 B to 8 MiB, no sync between.
		{"perftest write_bw -a", config{params: params{Test: "write_bw", Iters: 3}, Oob: "perftest", AllSizes: true}, runPerftest},
		{"perftest read_bw -a", config{params: params{Test: "read_bw", Iters: 3}, Oob: "perftest", AllSizes: true}, runPerftest},
		{"perftest write_lat -a", config{params: params{Test: "write_lat", Iters: 3}, Oob: "perftest", AllSizes: true}, runPerftest},
		{"perftest read_lat -a", config{params: params{Test: "read_lat", Iters: 3}, Oob: "perftest", AllSizes: true}, runPerftest},
		{"perftest -R write_bw", config{params: params{Test: "write_bw", Size: 8192, Iters: 50}, Oob: "perftest", RDMACM: true}, runPerftest},
		{"perftest -R read_bw", config{params: params{Test: "read_bw", Size: 8192, Iters: 50}, Oob: "perftest", RDMACM: true}, runPerftest},
		{"perftest -R send_lat", config{params: params{Test: "send_lat", Size: 13, Iters: 50}, Oob: "perftest", RDMACM: true}, runPerftest},
		{"rping", config{params: params{Test: "rping", Size: 64, Iters: 5}}, runRping},
		{"udaddy", config{params: params{Test: "udaddy", Size: 100, Iters: 10}}, runUdaddy},
	}
	// checks look at what the two ends of a case printed.
	checks := map[string]func(t *testing.T, printed string){
		"perftest write_bw -b":     bothMoved(2, 300*2),
		"perftest read_bw -b -q 2": bothMoved(4, 300*2),
		"perftest send_bw -b -q 2": bothMoved(4, 300*2),
		"perftest write_bw -a -b":  everySizeSummed,
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.cfg.TxDepth = 32 // the flag's default
			srv, cli := c.cfg, c.cfg
			srv.Port = freePort(t)
			require.NoError(t, srv.finish())
			cli.Port, cli.Server = srv.Port, "127.0.41.1"
			require.NoError(t, cli.finish())
			srv.DevAddr, cli.DevAddr = "127.0.41.1:4791", "127.0.41.2:4791"
			if check := checks[c.name]; check != nil {
				printed := captureStdout(t)
				defer func() { check(t, printed()) }()
			}
			errc := make(chan error, 1)
			go func() { errc <- c.run(&srv) }()
			// The client tries again, as a person would, until the server
			// listens.
			var err error
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
				// Refused: the server's port is not open yet; rejected
				// for want of a listener: its device is, its RDMA_CM
				// listener not yet.
				if err = c.run(&cli); err == nil || !strings.Contains(err.Error(), "refused") && !strings.Contains(err.Error(), "no listener") {
					break
				}
			}
			assert.NoError(t, err, "client")
			select {
			case err := <-errc:
				assert.NoError(t, err, "server")
			case <-time.After(60 * time.Second):
				t.Fatal("the server never finished")
			}
		})
	}
}

// TestRefusalsPrintOnlyWhatHappened: the refusals line names the counters
// that moved, and there is none when nothing was refused.
func TestRefusalsPrintOnlyWhatHappened(t *testing.T) {
	var b strings.Builder
	printRefusals(&b, refusals(vroce.DeviceStats{}))
	assert.Empty(t, b.String())
	d := vroce.DeviceStats{RxBadPKey: 2}
	d.QPs.ForgedResponses = 5
	printRefusals(&b, refusals(d))
	assert.Equal(t, " refused: bad_pkey 2, forged_responses 5\n", b.String())
}

// captureStdout sends what the process prints to stdout from now on to a
// pipe; the function it returns restores stdout and returns what came.
func captureStdout(t *testing.T) func() string {
	t.Helper()
	r, w, err := os.Pipe()
	require.NoError(t, err)
	saved := os.Stdout
	os.Stdout = w
	got := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(r)
		got <- string(b)
	}()
	return func() string {
		os.Stdout = saved
		w.Close()
		out := <-got
		r.Close()
		return out
	}
}

// bothMoved checks perftest's -b: each of the lines QPs' report (both
// ends together) sent and received at least packets, so every QP moved
// its own messages and took the other end's; without -b a server sends
// only ACKs (WRITE) or receives only requests (READ).
// everySizeSummed checks that both ends of an -a -b run printed a
// result line for every size from 2 B to 8 MiB.
func everySizeSummed(t *testing.T, printed string) {
	for n := 2; n <= pfLargestAll; n *= 2 {
		lines := regexp.MustCompile(fmt.Sprintf(`(?m)^ %d\s+3\s+[0-9.]+\s+[0-9.]+`, n)).FindAllString(printed, -1)
		assert.Len(t, lines, 2, "a line for %d bytes from each end", n)
	}
}

func bothMoved(lines, packets int) func(t *testing.T, printed string) {
	return func(t *testing.T, printed string) {
		m := regexp.MustCompile(`QPN 0x[0-9a-f]+: ([0-9]+) packets sent, ([0-9]+) received`).FindAllStringSubmatch(printed, -1)
		require.Len(t, m, lines, "a QP report from each QP of each end:\n%s", printed)
		for _, q := range m {
			sent, _ := strconv.Atoi(q[1])
			received, _ := strconv.Atoi(q[2])
			assert.GreaterOrEqual(t, sent, packets, "sent: %s", q[0])
			assert.GreaterOrEqual(t, received, packets, "received: %s", q[0])
		}
	}
}
