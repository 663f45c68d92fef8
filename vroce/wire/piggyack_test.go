package wire_test

import (
	"bytes"
	"errors"
	"testing"

	"vroce.dev/vroce/wire"
)

// A piggybacked ACK rides at the end of an RC SEND's or WRITE's payload:
// it round-trips with every such opcode (its own headers intact, the
// payload without the trailer, the pad unchanged), and is refused on
// anything else.
func TestPiggyACKRoundTrips(t *testing.T) {
	ack := wire.PiggyACK{PSN: 0xabcdef, AETH: wire.AETH{Syndrome: wire.AckSyndromeNoCredits, MSN: 0x123456}}
	for _, op := range []wire.Opcode{wire.RCSendOnly, wire.RCSendOnlyImm, wire.RCSendFirst, wire.RCSendLast, wire.RCWriteOnly, wire.RCWriteFirst, wire.RCWriteOnlyImm} {
		for _, n := range []int{0, 1, 3, 64, 1021} {
			in := wire.Packet{BTH: wire.BTH{Opcode: op, PKey: wire.DefaultPKey, DestQP: 0x77, PSN: 5, PiggyACK: true},
				RETH: wire.RETH{VA: 1 << 40, RKey: 9, DMALen: 4096}, Imm: 0xfeed, Piggy: ack, Payload: bytes.Repeat([]byte{0x5a}, n)}
			b := make([]byte, wire.Len(op, n)+wire.PiggyACKLen)
			l, err := in.Encode(b)
			if err != nil {
				t.Fatalf("%v, %d bytes: %v", op, n, err)
			}
			if l != len(b) {
				t.Fatalf("%v, %d bytes: encoded %d, want %d", op, n, l, len(b))
			}
			var out wire.Packet
			if err := wire.Parse(&out, b); err != nil {
				t.Fatalf("%v, %d bytes: %v", op, n, err)
			}
			if !out.BTH.PiggyACK || out.Piggy != ack || !bytes.Equal(out.Payload, in.Payload) || int(out.BTH.PadCnt) != wire.PadCount(n) {
				t.Fatalf("%v, %d bytes: got %+v", op, n, out)
			}
			if op.Flags()&wire.HasRETH != 0 && out.RETH != in.RETH || op.Flags()&wire.HasImm != 0 && out.Imm != in.Imm {
				t.Fatalf("%v: headers changed: %+v", op, out)
			}
		}
	}
	for _, op := range []wire.Opcode{wire.RCAcknowledge, wire.RCReadRequest, wire.RCReadResponseOnly, wire.UDSendOnly, wire.RCFetchAdd} {
		p := wire.Packet{BTH: wire.BTH{Opcode: op, PiggyACK: true}}
		if _, err := p.Encode(make([]byte, 4096)); err == nil {
			t.Fatalf("%v encoded with a piggybacked ACK", op)
		}
	}
}

func TestParseRefusesBadPiggyACKs(t *testing.T) {
	flag := func(op wire.Opcode, payload int) []byte {
		p := wire.Packet{BTH: wire.BTH{Opcode: op, PKey: wire.DefaultPKey}, Payload: make([]byte, payload)}
		b := make([]byte, wire.Len(op, payload))
		if _, err := p.Encode(b); err != nil {
			t.Fatal(err)
		}
		b[8] |= 0x01 // the PiggyACK bit, on a packet that lacks the trailer
		return b
	}
	for name, b := range map[string][]byte{
		"on an ACK":           flag(wire.RCAcknowledge, 0),
		"on a READ request":   flag(wire.RCReadRequest, 0),
		"on a UD SEND":        flag(wire.UDSendOnly, 64),
		"with no room for it": flag(wire.RCSendOnly, 4),
	} {
		var p wire.Packet
		var pe *wire.ParseError
		if err := wire.Parse(&p, b); !errors.As(err, &pe) {
			t.Errorf("%s: got %v, want a *ParseError", name, err)
		}
	}
}
