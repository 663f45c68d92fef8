package wire_test

import (
	"errors"
	"net/netip"
	"reflect"
	"testing"

	"vroce.dev/vroce/wire"
)

var testFlow = wire.Flow{
	Src: netip.MustParseAddrPort("127.0.0.1:50000"),
	Dst: netip.MustParseAddrPort("127.0.0.2:4791"),
}

func TestEveryOpcodeRoundTrips(t *testing.T) {
	payload := []byte("thirteen byte")
	buf := make([]byte, 256)
	for op := 0; op < 256; op++ {
		opc := wire.Opcode(op)
		if !opc.Known() {
			continue
		}
		p := wire.Packet{
			BTH:       wire.BTH{Opcode: opc, SE: true, PKey: wire.DefaultPKey, DestQP: 0xabcdef, AckReq: true, PSN: 0xfffffe},
			RETH:      wire.RETH{VA: 0x1122334455667788, RKey: 0xdeadbeef, DMALen: 8192},
			AETH:      wire.AETH{Syndrome: wire.NAK(wire.NAKRemoteAccessError), MSN: 0x123456},
			DETH:      wire.DETH{QKey: 0x11111111, SrcQP: 0x11},
			Atomic:    wire.AtomicETH{VA: 8, RKey: 7, SwapAdd: 6, Compare: 5},
			AtomicAck: 0x0102030405060708,
			Imm:       0xcafef00d,
			IETH:      0x42,
		}
		if opc.Flags()&wire.HasPayload != 0 {
			p.Payload = payload
		}
		n, err := p.Encode(buf)
		if err != nil {
			t.Fatalf("%v: encode: %v", opc, err)
		}
		if n != wire.Len(opc, len(p.Payload)) || n%4 != 0 {
			t.Fatalf("%v: encoded %d bytes, want %d (a multiple of 4)", opc, n, wire.Len(opc, len(p.Payload)))
		}
		if !testFlow.Seal(buf[:n]) || !testFlow.Check(buf[:n]) {
			t.Fatalf("%v: ICRC does not check after sealing", opc)
		}
		var q wire.Packet
		if err := wire.Parse(&q, buf[:n]); err != nil {
			t.Fatalf("%v: parse: %v", opc, err)
		}
		want := keepCarried(p)
		want.BTH.PadCnt = uint8(wire.PadCount(len(p.Payload)))
		if got := keepCarried(q); !reflect.DeepEqual(got, want) {
			t.Fatalf("%v: round trip\n got %+v\nwant %+v", opc, got, want)
		}
	}
}

// keepCarried zeroes the headers p's opcode does not carry.
func keepCarried(p wire.Packet) wire.Packet {
	f := p.BTH.Opcode.Flags()
	q := wire.Packet{BTH: p.BTH, Payload: p.Payload}
	if len(q.Payload) == 0 {
		q.Payload = nil
	}
	if f&wire.HasRETH != 0 {
		q.RETH = p.RETH
	}
	if f&wire.HasAETH != 0 {
		q.AETH = p.AETH
	}
	if f&wire.HasDETH != 0 {
		q.DETH = p.DETH
	}
	if f&wire.HasAtomicETH != 0 {
		q.Atomic = p.Atomic
	}
	if f&wire.HasAtomicAckETH != 0 {
		q.AtomicAck = p.AtomicAck
	}
	if f&wire.HasImm != 0 {
		q.Imm = p.Imm
	}
	if f&wire.HasIETH != 0 {
		q.IETH = p.IETH
	}
	if p.BTH.PiggyACK {
		q.Piggy = p.Piggy
	}
	return q
}

func TestParseRejectsMalformedPackets(t *testing.T) {
	valid := func(op wire.Opcode, payload int) []byte {
		p := wire.Packet{BTH: wire.BTH{Opcode: op, PKey: wire.DefaultPKey}, Payload: make([]byte, payload)}
		b := make([]byte, wire.Len(op, payload))
		if _, err := p.Encode(b); err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"BTH only", valid(wire.RCSendOnly, 0)[:wire.BTHLen]},
		{"unknown opcode", func() []byte { b := valid(wire.RCSendOnly, 4); b[0] = 0x1f; return b }()},
		{"transport version 1", func() []byte { b := valid(wire.RCSendOnly, 4); b[1] |= 1; return b }()},
		{"truncated RETH", valid(wire.RCWriteOnly, 0)[:wire.BTHLen+8+wire.ICRCLen]},
		{"READ request with payload", append(valid(wire.RCReadRequest, 0), 0, 0, 0, 0)},
		{"ACK trailer not a multiple of 4", append(valid(wire.RCAcknowledge, 0), 0)},
		{"pad beyond payload", func() []byte { b := valid(wire.RCSendOnly, 0); b[1] |= 3 << 4; return b }()},
		{"unaligned", append(valid(wire.RCSendOnly, 4), 0)},
	} {
		var p wire.Packet
		err := wire.Parse(&p, tc.b)
		var pe *wire.ParseError
		if !errors.As(err, &pe) {
			t.Errorf("%s: Parse = %v, want a *ParseError", tc.name, err)
		}
	}
}

func TestICRCDetectsEveryFlippedBit(t *testing.T) {
	p := wire.Packet{BTH: wire.BTH{Opcode: wire.RCSendOnly, PKey: wire.DefaultPKey, DestQP: 5, PSN: 9}, Payload: []byte("payload!")}
	b := make([]byte, 64)
	n, _ := p.Encode(b)
	b = b[:n]
	testFlow.Seal(b)
	for i := range b {
		if i == 4 { // resv8a is masked, as in rxe
			continue
		}
		for bit := 0; bit < 8; bit++ {
			b[i] ^= 1 << bit
			if testFlow.Check(b) {
				t.Fatalf("flipping bit %d of byte %d went unnoticed", bit, i)
			}
			b[i] ^= 1 << bit
		}
	}
	other := testFlow
	other.Src = netip.MustParseAddrPort("127.0.0.3:50000")
	if other.Check(b) {
		t.Fatal("ICRC checks for a different source address")
	}
}

func TestFlowRejectsMixedFamilies(t *testing.T) {
	f := wire.Flow{Src: netip.MustParseAddrPort("127.0.0.1:1"), Dst: netip.MustParseAddrPort("[::1]:2")}
	if f.Seal(make([]byte, 32)) {
		t.Fatal("Seal accepted an IPv4 to IPv6 flow")
	}
	mapped := wire.Flow{Src: netip.MustParseAddrPort("[::ffff:127.0.0.1]:1"), Dst: netip.MustParseAddrPort("127.0.0.2:2")}
	if !mapped.Seal(make([]byte, 32)) {
		t.Fatal("Seal rejected an IPv4-mapped source")
	}
}

func TestHotPathDoesNotAllocate(t *testing.T) {
	b := make([]byte, 2048)
	p := wire.Packet{BTH: wire.BTH{Opcode: wire.RCWriteFirst, PKey: wire.DefaultPKey}}
	var q wire.Packet
	allocs := testing.AllocsPerRun(100, func() {
		n, _ := p.EncodeHeaders(b, 1024)
		n = wire.Finish(b, n+1024)
		testFlow.Seal(b[:n])
		_ = wire.Parse(&q, b[:n])
		_ = testFlow.Check(b[:n])
	})
	if allocs != 0 {
		t.Fatalf("encode, seal, parse and check allocate %.1f times per packet", allocs)
	}
}

func BenchmarkSealAndCheck1024(b *testing.B) { benchSealAndCheck(b, 1024) }

// vRoCE's packet on a 1500-byte link (MTU1344).
func BenchmarkSealAndCheck1344(b *testing.B) { benchSealAndCheck(b, 1344) }

// A 64-byte message: the header prefix is most of the work.
func BenchmarkSealAndCheck64(b *testing.B) { benchSealAndCheck(b, 64) }

// The same with a Sealer, as a QP seals and checks: the headers' CRC
// comes from its cache.
func BenchmarkSealerSealAndCheck64(b *testing.B) {
	buf := make([]byte, 2048)
	p := wire.Packet{BTH: wire.BTH{Opcode: wire.RCSendMiddle, PKey: wire.DefaultPKey}}
	n, _ := p.EncodeHeaders(buf, 64)
	n = wire.Finish(buf, n+64)
	tx, rx := wire.Sealer{Flow: testFlow}, wire.Sealer{Flow: testFlow}
	b.SetBytes(int64(n))
	for b.Loop() {
		tx.Seal(buf[:n])
		if !rx.Check(buf[:n]) {
			b.Fatal("bad ICRC")
		}
	}
}

func benchSealAndCheck(b *testing.B, payload int) {
	buf := make([]byte, 2048)
	p := wire.Packet{BTH: wire.BTH{Opcode: wire.RCSendMiddle, PKey: wire.DefaultPKey}}
	n, _ := p.EncodeHeaders(buf, payload)
	n = wire.Finish(buf, n+payload)
	b.SetBytes(int64(n))
	for b.Loop() {
		testFlow.Seal(buf[:n])
		if !testFlow.Check(buf[:n]) {
			b.Fatal("bad ICRC")
		}
	}
}
