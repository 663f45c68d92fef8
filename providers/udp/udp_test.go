package udp_test

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"vroce.dev/internal/pcap"
	"vroce.dev/internal/testkit/verbstest"
	_ "vroce.dev/providers/udp"
	"vroce.dev/vroce"
	"vroce.dev/vroce/cm"
	"vroce.dev/vroce/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestVerbsOverUDPLoopback(t *testing.T) {
	for _, tc := range []struct{ name, a, b string }{
		{"IPv4", "127.0.0.1:0", "127.0.0.1:0"},
		{"IPv6", "[::1]:0", "[::1]:0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			da := verbstest.OpenDevice(t, vroce.Config{Provider: "udp", Addr: tc.a})
			db := verbstest.OpenDevice(t, vroce.Config{Provider: "udp", Addr: tc.b})
			// Loopback carries 64 KiB datagrams: the largest extension
			// MTU, which vRoCE peers use between them.
			if da.Attr().ActiveMTU != vroce.MTU32768 {
				t.Errorf("loopback active MTU %d, want 32768", da.Attr().ActiveMTU)
			}
			o := verbstest.DefaultOpts()
			o.MTU = vroce.MTU32768
			o.BufSize = 8 << 20
			a, b := verbstest.Pair(t, da, db, o)
			verbstest.Exercise(t, a, b, 4<<20)
			if s := da.Stats(); s.RxBadICRC != 0 || s.RxMalformed != 0 {
				t.Fatalf("device counters: %+v", s)
			}
		})
	}
}

// TestPcapDecodesAsRoCE records a device's traffic with VROCE_PCAP and has
// tshark decode it: every frame must be RoCE (RRoCE over UDP 4791) with no
// malformed or error-flagged frame, also where the two ends leave the
// ICRC to the UDP checksum (zeros where it goes).
func TestPcapDecodesAsRoCE(t *testing.T) {
	tshark := needTshark(t)
	for _, tc := range []struct {
		name, a, b string
		noICRC     bool
	}{
		{"IPv4", "127.0.0.71:4791", "127.0.0.72:4791", false},
		{"IPv6", "[::1]:4791", "", false},
		{"IPv4 without the ICRC", "127.0.0.73:4791", "127.0.0.74:4791", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "vroce.pcap")
			t.Setenv("VROCE_PCAP", path)
			da, err := vroce.Open(vroce.Config{Provider: "udp", Addr: tc.a})
			if err != nil {
				t.Fatal(err)
			}
			t.Setenv("VROCE_PCAP", "")
			bAddr := tc.b
			if bAddr == "" {
				bAddr = "[::1]:0"
			}
			db := verbstest.OpenDevice(t, vroce.Config{Provider: "udp", Addr: bAddr})
			o := verbstest.DefaultOpts()
			o.UDPChecksum = tc.noICRC
			a, b := verbstest.Pair(t, da, db, o)
			verbstest.Exercise(t, a, b, 64<<10)
			if err := da.Close(); err != nil {
				t.Fatal(err)
			}
			if got := icrcsOf(t, path); got.zero == 0 == tc.noICRC || got.zero != 0 && got.sealed != 0 {
				t.Fatalf("%d RC packets with a zero ICRC and %d with another, want all %s", got.zero, got.sealed, map[bool]string{true: "zero", false: "sealed"}[tc.noICRC])
			}
			// rpcordma is Wireshark's heuristic RPC-over-RDMA dissector: it
			// claims small SENDs and calls them malformed (see the rxe
			// capture README); it says nothing about RoCE.
			tsharkArgs := []string{"-n", "-r", path, "--disable-protocol", "rpcordma",
				"-d", fmt.Sprintf("udp.port==%d,infiniband", db.LocalAddr().Port())}
			out, err := exec.Command(tshark, append(tsharkArgs, "-T", "fields", "-e", "frame.protocols")...).Output()
			if err != nil {
				t.Fatalf("tshark: %v", err)
			}
			protocols := strings.Split(strings.TrimSpace(string(out)), "\n")
			if len(protocols) < 100 {
				t.Fatalf("capture holds %d frames, want the whole exchange", len(protocols))
			}
			for i, p := range protocols {
				if !strings.Contains(p, ":udp:infiniband") {
					t.Fatalf("frame %d decodes as %q, not RoCE", i+1, p)
				}
			}
			const expertError = "8388608" // PI_ERROR
			bad, err := exec.Command(tshark, append(tsharkArgs, "-Y", "_ws.malformed || _ws.expert.severity >= "+expertError)...).Output()
			if err != nil {
				t.Fatalf("tshark: %v", err)
			}
			if len(bytes.TrimSpace(bad)) != 0 {
				t.Fatalf("tshark flags frames of %d as malformed or in error:\n%s", len(protocols), bad)
			}
		})
	}
}

// needTshark finds tshark, or skips saying how to get it; CI installs it,
// so there a missing tshark fails the test.
func needTshark(t *testing.T) string {
	t.Helper()
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("tshark is not installed; .ci/run installs it")
		}
		t.Skip("tshark not installed (apt-get install tshark); CI runs this check")
	}
	return tshark
}

// TestDeviceOnAllAddresses: a device bound to every address (dual-stack
// ":0") learns its source address from the routing table, sends IPv4 from
// an IPv6 socket, and checks ICRCs against its QP's flow.
func TestDeviceOnAllAddresses(t *testing.T) {
	da := verbstest.OpenDevice(t, vroce.Config{Provider: "udp", Addr: ":0"})
	db := verbstest.OpenDevice(t, vroce.Config{Provider: "udp", Addr: "127.0.0.1:0"})
	if !da.LocalAddr().Addr().IsUnspecified() {
		t.Fatalf("device on %v, want all addresses", da.LocalAddr())
	}
	o := verbstest.DefaultOpts()
	o.BufSize = 4 << 20
	a, b := verbstest.NewNode(t, da, o), verbstest.NewNode(t, db, o)
	loopA := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), da.LocalAddr().Port())
	p := cm.Params{Access: o.Access}
	if err := cm.Connect(a.QP, 100, cm.Peer{QPN: b.QP.QPN(), PSN: 200, Addr: db.LocalAddr(), MTU: vroce.MTU1024, SelectiveRepeat: true}, p); err != nil {
		t.Fatal(err)
	}
	if err := cm.Connect(b.QP, 200, cm.Peer{QPN: a.QP.QPN(), PSN: 100, Addr: loopA, MTU: vroce.MTU1024, SelectiveRepeat: true}, p); err != nil {
		t.Fatal(err)
	}
	verbstest.Exercise(t, a, b, 1<<20)
	// Every datagram accepted: the ICRC rebuilt from the QP's flow holds.
	if s := da.Stats(); s.RxBadICRC != 0 || s.QPs.WrongSource != 0 || s.QPs.RxPackets == 0 {
		t.Fatalf("device on all addresses dropped packets: %+v", s)
	}
}

// rcICRCs counts the RC packets of a capture by their ICRC: zero, or
// sealed for the headers they travelled in.
type rcICRCs struct{ zero, sealed int }

func icrcsOf(t *testing.T, path string) rcICRCs {
	t.Helper()
	ds, err := pcap.ReadUDP(path)
	if err != nil {
		t.Fatal(err)
	}
	var n rcICRCs
	for _, d := range ds {
		var p wire.Packet
		if wire.Parse(&p, d.Payload) != nil || p.BTH.DestQP == vroce.GSIQPN {
			continue
		}
		switch icrc := d.Payload[len(d.Payload)-wire.ICRCLen:]; {
		case bytes.Equal(icrc, make([]byte, wire.ICRCLen)):
			n.zero++
		case wire.CheckICRC(d.IPHeader, d.UDPHeader, d.Payload):
			n.sealed++
		default:
			t.Fatalf("frame %d: an ICRC neither zero nor right", d.Frame)
		}
	}
	return n
}
