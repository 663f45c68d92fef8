package udp_test

import (
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"

	"vroce.dev/internal/pcap"
	"vroce.dev/internal/testkit/verbstest"
	"vroce.dev/providers/sim"
	"vroce.dev/vroce"
	"vroce.dev/vroce/wire"
)

// TestSACKsDecodeAsPlainRoCEAcks records a selective-repeat exchange over
// a lossy network: the capture holds ACKs with SACK trailers and requests
// carrying piggybacked ACKs, and tshark still decodes every frame as RoCE
// with nothing malformed.
func TestSACKsDecodeAsPlainRoCEAcks(t *testing.T) {
	tshark := needTshark(t)
	network := sim.NewNetwork(sim.Config{Seed: 5, Loss: 0.05})
	t.Cleanup(network.Close)
	path := filepath.Join(t.TempDir(), "sack.pcap")
	da, err := vroce.Open(vroce.Config{Provider: "sim", Addr: "127.0.0.1:4791", ProviderOptions: network, PcapPath: path})
	if err != nil {
		t.Fatal(err)
	}
	db := verbstest.OpenDevice(t, vroce.Config{Provider: "sim", Addr: "127.0.0.2:4791", ProviderOptions: network})
	o := verbstest.DefaultOpts()
	o.BufSize = 2 << 20
	a, b := verbstest.Pair(t, da, db, o)
	verbstest.Exercise(t, a, b, 512<<10)
	verbstest.PingPong(t, a, b, 50, 100) // replies carry piggybacked ACKs
	if err := da.Close(); err != nil {
		t.Fatal(err)
	}
	ds, err := pcap.ReadUDP(path)
	if err != nil {
		t.Fatal(err)
	}
	sacks, full, piggy := 0, 0, 0
	for _, d := range ds {
		var p wire.Packet
		var s wire.SACK
		// Full-size payloads leave straight from registered memory, in
		// pieces; the capture holds them whole, ICRC and all.
		if !wire.CheckICRC(d.IPHeader, d.UDPHeader, d.Payload) {
			t.Fatalf("frame %d: bad ICRC", d.Frame)
		}
		if wire.Parse(&p, d.Payload) == nil && p.BTH.Opcode == wire.RCAcknowledge && wire.ParseSACK(&s, p.Payload) {
			sacks++
		}
		if len(p.Payload) == int(o.MTU) {
			full++
		}
		if p.BTH.PiggyACK {
			piggy++
		}
	}
	if sacks == 0 || full == 0 || piggy == 0 {
		t.Fatalf("%d SACKs, %d full-size data packets and %d piggybacked ACKs in the capture of a lossy exchange", sacks, full, piggy)
	}
	bad, err := exec.Command(tshark, "-n", "-r", path, "--disable-protocol", "rpcordma", "-Y", "!infiniband || _ws.malformed || _ws.expert.severity >= 8388608").Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	if len(bytes.TrimSpace(bad)) != 0 {
		t.Fatalf("tshark does not decode every frame as clean RoCE (%d SACKs in the capture):\n%s", sacks, bad)
	}
}

// Packets at the largest extension MTU, recorded over loopback, carry
// right ICRCs and decode in tshark as clean RoCE: the payload is just
// longer than an IB MTU allows.
func TestExtensionMTUPacketsDecode(t *testing.T) {
	tshark := needTshark(t)
	path := filepath.Join(t.TempDir(), "big.pcap")
	da, err := vroce.Open(vroce.Config{Provider: "udp", Addr: "127.0.0.1:0", PcapPath: path})
	if err != nil {
		t.Fatal(err)
	}
	db := verbstest.OpenDevice(t, vroce.Config{Provider: "udp", Addr: "127.0.0.1:0"})
	o := verbstest.DefaultOpts()
	o.MTU, o.BufSize = vroce.MTU32768, 4<<20
	a, b := verbstest.Pair(t, da, db, o)
	verbstest.Exercise(t, a, b, 1<<20)
	verbstest.PingPong(t, a, b, 10, 40000)
	if err := da.Close(); err != nil {
		t.Fatal(err)
	}
	ds, err := pcap.ReadUDP(path)
	if err != nil {
		t.Fatal(err)
	}
	full := 0
	for _, d := range ds {
		if !wire.CheckICRC(d.IPHeader, d.UDPHeader, d.Payload) {
			t.Fatalf("frame %d: bad ICRC", d.Frame)
		}
		var p wire.Packet
		if wire.Parse(&p, d.Payload) == nil && len(p.Payload) == int(o.MTU) {
			full++
		}
	}
	if full == 0 {
		t.Fatal("no 32 KiB packet in the capture")
	}
	// The devices are on ports of the kernel's choosing: decode them as
	// RoCE, as tshark does port 4791.
	bad, err := exec.Command(tshark, "-n", "-r", path, "--disable-protocol", "rpcordma",
		"-d", fmt.Sprintf("udp.port==%d,infiniband", da.LocalAddr().Port()), "-d", fmt.Sprintf("udp.port==%d,infiniband", db.LocalAddr().Port()),
		"-Y", "!infiniband || _ws.malformed || _ws.expert.severity >= 8388608").Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	if len(bytes.TrimSpace(bad)) != 0 {
		t.Fatalf("tshark does not decode every frame as clean RoCE:\n%s", bad)
	}
}
