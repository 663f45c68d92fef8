package wire_test

import (
	"testing"

	"vroce.dev/vroce/wire"
)

func TestSACKAckRoundTripsAndStaysAPlainAck(t *testing.T) {
	var s wire.SACK
	s.AppendBlock(0xfffffe, 3) // wraps
	s.AppendBlock(10, 1)
	trailer := make([]byte, s.Len())
	s.Encode(trailer)
	p := wire.Packet{BTH: wire.BTH{Opcode: wire.RCAcknowledge, PKey: wire.DefaultPKey, PSN: 0xfffff0}, AETH: wire.AETH{Syndrome: wire.AckSyndromeNoCredits}, Payload: trailer}
	b := make([]byte, 128)
	n, err := p.Encode(b)
	if err != nil {
		t.Fatal(err)
	}
	var q wire.Packet
	if err := wire.Parse(&q, b[:n]); err != nil {
		t.Fatal(err)
	}
	if q.BTH.PSN != 0xfffff0 || q.AETH.Syndrome != wire.AckSyndromeNoCredits {
		t.Fatalf("the cumulative ACK changed: %+v", q)
	}
	var got wire.SACK
	if !wire.ParseSACK(&got, q.Payload) || got.N != 2 || got.Blocks[0] != (wire.SACKBlock{First: 0xfffffe, Count: 3}) || got.Blocks[1] != (wire.SACKBlock{First: 10, Count: 1}) {
		t.Fatalf("SACK %+v", got)
	}
	var plain wire.SACK
	if wire.ParseSACK(&plain, nil) {
		t.Fatal("an ACK without a trailer parsed as a SACK")
	}
}

func FuzzParseSACK(f *testing.F) {
	var s wire.SACK
	s.AppendBlock(5, 2)
	b := make([]byte, s.Len())
	s.Encode(b)
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		var s wire.SACK
		if wire.ParseSACK(&s, b) {
			out := make([]byte, s.Len())
			s.Encode(out)
			var again wire.SACK
			if !wire.ParseSACK(&again, out) || again != s {
				t.Fatalf("round trip changed %+v to %+v", s, again)
			}
		}
	})
}
