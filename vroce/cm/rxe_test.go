package cm

import (
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"vroce.dev/internal/pcap"
	"vroce.dev/providers/sim"
	"vroce.dev/vroce"
	"vroce.dev/vroce/wire"
)

// capturedMAD is a CM message from a Soft-RoCE capture.
type capturedMAD struct {
	from netip.Addr
	raw  []byte
	msg  mad
	err  error
}

// rxeMADs reads the QP1 traffic of one of the rdma_rxe reference captures.
func rxeMADs(t *testing.T, name string) []capturedMAD {
	t.Helper()
	ds, err := pcap.ReadUDP(filepath.Join("..", "wire", "testdata", "rxe-pcaps", name))
	if err != nil {
		t.Fatal(err)
	}
	var out []capturedMAD
	for _, d := range ds {
		var p wire.Packet
		if d.DstPort != 4791 || wire.Parse(&p, d.Payload) != nil || p.BTH.DestQP != vroce.GSIQPN {
			continue
		}
		c := capturedMAD{from: netip.AddrFrom4([4]byte(d.IPHeader[12:16])), raw: append([]byte(nil), p.Payload...)}
		c.err = parseMAD(c.raw, &c.msg)
		out = append(out, c)
	}
	return out
}

// TestParseMADReadsRxeCaptures decodes the connection setup and teardown
// that rdma_cm over Soft-RoCE sent in the reference captures, and checks
// the fields hang together as the protocol says.
func TestParseMADReadsRxeCaptures(t *testing.T) {
	client, server := netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.0.0.1")
	for _, name := range []string{"read_bw_cm.pcap", "write_bw_cm.pcap", "rping.pcap"} {
		t.Run(name, func(t *testing.T) {
			mads := rxeMADs(t, name)
			var req, rep *mad
			seen := map[attrID]int{}
			for i := range mads {
				c := &mads[i]
				if c.err != nil {
					t.Fatalf("message %d: %v", i, c.err)
				}
				m := &c.msg
				seen[m.attr]++
				switch m.attr {
				case attrREQ:
					req, rep = m, nil
					if c.from != client || m.serviceID>>16 != psTCP || m.qpn < 2 || m.mtu == 0 || m.vflags != 0 ||
						m.srcIP != client || m.dstIP != server || len(m.priv) != MaxPrivateData {
						t.Fatalf("REQ %+v", m)
					}
				case attrREP:
					rep = m
					if c.from != server || req == nil || m.remoteID != req.localID || m.qpn < 2 || m.vflags != 0 || len(m.priv) != repPrivLen {
						t.Fatalf("REP %+v for REQ %+v", m, req)
					}
				case attrRTU:
					if rep == nil || m.localID != req.localID || m.remoteID != rep.localID {
						t.Fatalf("RTU %+v after REP %+v", m, rep)
					}
				case attrDREQ, attrDREP:
					if m.localID == 0 || m.remoteID == 0 {
						t.Fatalf("%v without IDs: %+v", m.attr, m)
					}
				}
			}
			if seen[attrREQ] == 0 || seen[attrREQ] != seen[attrREP] || seen[attrREP] != seen[attrRTU] || seen[attrDREQ] == 0 || seen[attrDREP] == 0 {
				t.Fatalf("messages seen: %v", seen)
			}
		})
	}
}

// TestManagerAcceptsAnRxeRequest hands a REQ that rdma_cm sent over
// Soft-RoCE to a listening manager: it is a request like any other, and
// the REP that answers it names the rxe client's communication ID.
func TestManagerAcceptsAnRxeRequest(t *testing.T) {
	mads := rxeMADs(t, "write_bw_cm.pcap")
	req := mads[0]
	if req.msg.attr != attrREQ {
		t.Fatalf("the capture opens with %v", req.msg.attr)
	}
	network := sim.NewNetwork(sim.Config{})
	t.Cleanup(network.Close)
	from := netip.AddrPortFrom(req.from, 4791)
	srv := openEnd(t, vroce.Config{Provider: "sim", Addr: "10.0.0.1:4791", ProviderOptions: network}, Config{ResponseTimeout: 5 * time.Second})
	client, err := network.Attach(from) // stands in for the rxe host, to see the answer
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	l, err := srv.m.Listen(uint16(req.msg.serviceID), 0)
	if err != nil {
		t.Fatal(err)
	}
	srv.m.receive(from, req.raw)
	r, err := l.Accept(ctxFor(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if r.Peer != from || r.MTU != req.msg.mtu || r.SelectiveRepeat || len(r.PrivateData) != MaxPrivateData {
		t.Fatalf("request %+v from an rxe REQ %+v", r, req.msg)
	}
	qp := srv.newQP(t)
	if _, err := r.Accept(qp, Params{}); err != nil {
		t.Fatal(err)
	}
	pkts := make([]vroce.Packet, 1)
	pkts[0].Data = make([]byte, vroce.MaxPacketSize)
	n, err := client.Recv(pkts)
	if err != nil || n != 1 {
		t.Fatal(n, err)
	}
	var p wire.Packet
	var rep mad
	if err := wire.Parse(&p, pkts[0].Data); err != nil || parseMAD(p.Payload, &rep) != nil || rep.attr != attrREP || rep.remoteID != req.msg.localID || rep.vflags != 0 {
		t.Fatalf("the answer is not a REP to the rxe client: %+v (%v)", rep, err)
	}
	// Linux reads the reserved bytes of a REP as the ECE vendor ID and
	// rejects one it does not know: a REP to it leaves them zero, and
	// the MAD header as Linux sends it.
	d := p.Payload[madHeaderLen:]
	for _, i := range []int{6, 7, markerOff, markerOff + 1, markerOff + 2, markerOff + 3} {
		if b := p.Payload[i]; b != 0 {
			t.Errorf("MAD header byte %d is %#x, want 0", i, b)
		}
	}
	for _, i := range []int{15, 19, 23} { // the ECE vendor ID's bytes
		if d[i] != 0 {
			t.Errorf("REP byte %d is %#x, want 0", i, d[i])
		}
	}
	// The passive end sends from the REQ's starting PSN and receives from
	// its REP's, as Linux's CM reads them (rping.pcap).
	if at := qp.Attr(); at.DestQPN != req.msg.qpn || at.SQPSN != req.msg.psn || at.RQPSN != rep.psn || at.SelectiveRepeat || at.PiggybackACK || at.StrictSourcePort {
		t.Fatalf("QP aimed at %#x, sending from PSN %#x and receiving from %#x (selective repeat %v, strict port %v); want the REQ's %#x and %#x, the REP's %#x, go-back-N, any port",
			at.DestQPN, at.SQPSN, at.RQPSN, at.SelectiveRepeat, at.StrictSourcePort, req.msg.qpn, req.msg.psn, rep.psn)
	}
}

// TestREQAndREPAreTheOnesLinuxSends lays out the REQ and REP rdma_cm sent
// over Soft-RoCE from their decoded fields: byte for byte the same, but
// for the vRoCE marker in the MAD header of the REQ, which Linux's CM
// ignores (a REP to a CM that is not vRoCE carries none).
func TestREQAndREPAreTheOnesLinuxSends(t *testing.T) {
	for _, name := range []string{"rping.pcap", "write_bw_cm.pcap", "read_bw_cm.pcap"} {
		for _, c := range rxeMADs(t, name)[:2] {
			ours := c.msg
			ours.plain = c.msg.attr == attrREP
			if c.msg.attr == attrREQ {
				ours.vflags = vFlagDevicePort | vFlagPresent
			}
			var b [vroce.MADSize]byte
			ours.marshal(&b)
			for i := range b {
				if c.msg.attr == attrREQ && (i == 6 || i == 7 || i >= markerOff && i < markerOff+4) {
					continue
				}
				assert.Equal(t, c.raw[i], b[i], "%s: %v byte %d (MAD data byte %d)", name, c.msg.attr, i, i-madHeaderLen)
			}
		}
	}
}
