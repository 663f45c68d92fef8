package wire_test

import (
	"bytes"
	"net/netip"
	"reflect"
	"testing"

	"vroce.dev/vroce/wire"
)

func addRxeSeeds(f *testing.F, max int) {
	for i, fr := range rxeFrames(f) {
		if i%(4065/max+1) == 0 {
			f.Add(fr.d.Payload)
		}
	}
}

// FuzzParse: hostile bytes never panic, and whatever parses re-encodes to a
// packet that parses to the same thing.
func FuzzParse(f *testing.F) {
	addRxeSeeds(f, 40)
	for _, op := range []wire.Opcode{wire.RCSendOnly, wire.RCWriteFirst} { // with a piggybacked ACK
		p := wire.Packet{BTH: wire.BTH{Opcode: op, PKey: wire.DefaultPKey, PiggyACK: true}, Piggy: wire.PiggyACK{PSN: 7, AETH: wire.AETH{MSN: 3}}, Payload: []byte("seed")}
		b := make([]byte, wire.Len(op, 4)+wire.PiggyACKLen)
		if _, err := p.Encode(b); err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var p wire.Packet
		if err := wire.Parse(&p, b); err != nil {
			return
		}
		_ = testFlow.Check(b)
		if id, ok := testFlow.CheckUnknownID(b); ok && id == 0 && !testFlow.Check(b) {
			t.Fatalf("accepted with ID 0 but the full check fails")
		}
		out := make([]byte, len(b)+8)
		n, err := p.Encode(out)
		if err != nil {
			t.Fatalf("parsed packet does not encode: %v", err)
		}
		var q wire.Packet
		if err := wire.Parse(&q, out[:n]); err != nil {
			t.Fatalf("re-encoded packet does not parse: %v", err)
		}
		p.BTH.PadCnt = uint8(wire.PadCount(len(p.Payload)))
		if len(p.Payload) == 0 {
			p.Payload, q.Payload = nil, nil
		}
		if !reflect.DeepEqual(keepCarried(p), keepCarried(q)) {
			t.Fatalf("round trip changed the packet:\n%+v\n%+v", p, q)
		}
	})
}

// FuzzICRC: arbitrary header bytes never panic the ICRC.
func FuzzICRC(f *testing.F) {
	for i, fr := range rxeFrames(f) {
		if i%200 == 0 {
			f.Add(fr.d.IPHeader, fr.d.UDPHeader, fr.d.Payload)
		}
	}
	f.Fuzz(func(t *testing.T, ip, udp, pkt []byte) {
		_ = wire.CheckICRC(ip, udp, pkt)
	})
}

// FuzzCheckCopy: checking a packet while copying its payload out agrees
// with Check and CheckUnknownID, and copies exactly the payload, for any
// bytes sealed or not, any payload offset and length.
func FuzzCheckCopy(f *testing.F) {
	addRxeSeeds(f, 8)
	f.Fuzz(func(t *testing.T, pkt []byte) {
		flow := wire.Flow{Src: netip.MustParseAddrPort("10.0.0.1:55410"), Dst: netip.MustParseAddrPort("10.0.0.2:4791")}
		if len(pkt) < 3 {
			return
		}
		at, n, seal := int(pkt[0]), int(pkt[1])*int(pkt[2]), pkt[0]&1 == 0
		pkt = pkt[3:]
		if seal {
			flow.Seal(pkt)
		}
		for _, unknownID := range []bool{false, true} {
			s, ref := wire.Sealer{Flow: flow}, wire.Sealer{Flow: flow}
			dst := make([]byte, n)
			got := s.CheckCopy(pkt, at, dst, unknownID)
			if at < wire.BTHLen || at+n > len(pkt)-wire.ICRCLen {
				if got || !bytes.Equal(dst, make([]byte, n)) {
					t.Fatalf("payload of %d at %d in %d bytes: %v, or copied", n, at, len(pkt), got)
				}
				continue
			}
			want := ref.Check(pkt)
			if unknownID {
				_, want = ref.CheckUnknownID(pkt)
			}
			if got != want {
				t.Fatalf("payload of %d at %d in %d bytes (unknown ID %v): %v, Check %v", n, at, len(pkt), unknownID, got, want)
			}
			if !bytes.Equal(dst, pkt[at:at+n]) {
				t.Fatalf("payload of %d at %d: not copied", n, at)
			}
		}
	})
}
