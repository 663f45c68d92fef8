package wire_test

import (
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
