package wire_test

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"path/filepath"
	"testing"

	"vroce.dev/internal/pcap"
	"vroce.dev/vroce/wire"
)

// rxeFrame is one RoCE datagram from the Soft-RoCE reference captures.
type rxeFrame struct {
	file string
	n    int
	d    pcap.UDPDatagram
}

func rxeFrames(t testing.TB) []rxeFrame {
	t.Helper()
	files, err := filepath.Glob("testdata/rxe-pcaps/*.pcap")
	if err != nil || len(files) == 0 {
		t.Fatalf("no reference captures in testdata/rxe-pcaps: %v", err)
	}
	var out []rxeFrame
	for _, f := range files {
		ds, err := pcap.ReadUDP(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			if d.DstPort == wire.UDPPort {
				out = append(out, rxeFrame{filepath.Base(f), d.Frame, d.UDPDatagram})
			}
		}
	}
	return out
}

// TestRxeCapturesDecodeAndICRCMatch is the wire oracle: every RoCE frame that
// Linux rdma_rxe sent decodes, its ICRC checks, and re-encoding the decoded
// packet gives back the kernel's bytes exactly.
func TestRxeCapturesDecodeAndICRCMatch(t *testing.T) {
	frames := rxeFrames(t)
	const wantFrames = 4065 // counted by an independent decoder (README)
	if len(frames) != wantFrames {
		t.Fatalf("found %d RoCE frames in the captures, want %d", len(frames), wantFrames)
	}
	ops := map[wire.Opcode]int{}
	buf := make([]byte, 9000)
	for _, f := range frames {
		var p wire.Packet
		if err := wire.Parse(&p, f.d.Payload); err != nil {
			t.Errorf("%s frame %d: %v", f.file, f.n, err)
			continue
		}
		ops[p.BTH.Opcode]++
		if !wire.CheckICRC(f.d.IPHeader, f.d.UDPHeader, f.d.Payload) {
			t.Errorf("%s frame %d (%v): ICRC mismatch", f.file, f.n, p.BTH.Opcode)
		}
		n, err := p.Encode(buf)
		if err != nil {
			t.Errorf("%s frame %d: encode: %v", f.file, f.n, err)
			continue
		}
		orig := f.d.Payload
		if n != len(orig) || !bytes.Equal(buf[:n-wire.ICRCLen], orig[:n-wire.ICRCLen]) {
			t.Errorf("%s frame %d (%v): re-encoded bytes differ from the kernel's", f.file, f.n, p.BTH.Opcode)
		}
	}
	for _, op := range []wire.Opcode{
		wire.RCSendFirst, wire.RCSendMiddle, wire.RCSendLast, wire.RCSendOnly,
		wire.RCWriteFirst, wire.RCWriteMiddle, wire.RCWriteLast, wire.RCWriteOnly,
		wire.RCReadRequest, wire.RCReadResponseFirst, wire.RCReadResponseMiddle,
		wire.RCReadResponseLast, wire.RCReadResponseOnly, wire.RCAcknowledge,
		wire.RCAtomicAcknowledge, wire.RCCompareSwap, wire.RCFetchAdd,
		wire.UCSendFirst, wire.UCSendLast, wire.UDSendOnly, wire.UDSendOnlyImm,
	} {
		if ops[op] == 0 {
			t.Errorf("no %v in the captures: the oracle no longer covers it", op)
		}
	}
}

// TestFlowRebuildsRxeIPv6Headers checks the header rebuilding the udp
// provider relies on: for IPv6 frames (no IP ID) the ICRC computed from the
// addresses alone equals the one rxe computed over the real headers.
func TestFlowRebuildsRxeIPv6Headers(t *testing.T) {
	checked := 0
	for _, f := range rxeFrames(t) {
		if f.d.IPHeader[0]>>4 != 6 {
			continue
		}
		src, _ := netip.AddrFromSlice(f.d.IPHeader[8:24])
		dst, _ := netip.AddrFromSlice(f.d.IPHeader[24:40])
		flow := wire.Flow{
			Src: netip.AddrPortFrom(src, f.d.SrcPort),
			Dst: netip.AddrPortFrom(dst, f.d.DstPort),
		}
		if !flow.Check(f.d.Payload) {
			t.Fatalf("%s frame %d: ICRC rebuilt from %v does not match", f.file, f.n, flow)
		}
		checked++
	}
	if checked < 100 {
		t.Fatalf("only %d IPv6 frames checked", checked)
	}
}

// TestCheckUnknownIDFindsRxeIPv4IDs is what a UDP socket's receiver does
// with rxe's IPv4 packets, whose IDs count up: rebuilt from the addresses
// alone, every one checks, and the ID solved for is the one on the wire.
func TestCheckUnknownIDFindsRxeIPv4IDs(t *testing.T) {
	checked, nonzero := 0, 0
	for _, f := range rxeFrames(t) {
		ip := f.d.IPHeader
		if ip[0]>>4 != 4 {
			continue
		}
		flow := wire.Flow{
			Src: netip.AddrPortFrom(netip.AddrFrom4([4]byte(ip[12:16])), f.d.SrcPort),
			Dst: netip.AddrPortFrom(netip.AddrFrom4([4]byte(ip[16:20])), f.d.DstPort),
		}
		id, ok := flow.CheckUnknownID(f.d.Payload)
		if want := binary.BigEndian.Uint16(ip[4:]); !ok || id != want {
			t.Fatalf("%s frame %d: solved ID %#x (%v), the header says %#x", f.file, f.n, id, ok, want)
		}
		checked++
		if id != 0 {
			nonzero++
		}
	}
	if checked < 3000 || nonzero < checked/2 {
		t.Fatalf("checked %d IPv4 frames, %d with a non-zero ID", checked, nonzero)
	}
}

// TestICRCMasksVariantFields repeats the capture README's mutation test:
// TTL, ECN and resv8a are outside the ICRC; SE, the UDP port and the payload
// are inside it.
func TestICRCMasksVariantFields(t *testing.T) {
	var f rxeFrame
	for _, c := range rxeFrames(t) {
		if c.d.IPHeader[0]>>4 == 4 && len(c.d.Payload) > 64 {
			f = c
			break
		}
	}
	mutate := func(name string, fn func(ip, udp, pkt []byte), wantValid bool) {
		ip, udp, pkt := bytes.Clone(f.d.IPHeader), bytes.Clone(f.d.UDPHeader), bytes.Clone(f.d.Payload)
		fn(ip, udp, pkt)
		if got := wire.CheckICRC(ip, udp, pkt); got != wantValid {
			t.Errorf("%s: ICRC valid = %v, want %v", name, got, wantValid)
		}
	}
	mutate("TTL", func(ip, _, _ []byte) { ip[8]-- }, true)
	mutate("ECN", func(ip, _, _ []byte) { ip[1] |= 3 }, true)
	mutate("resv8a", func(_, _, pkt []byte) { pkt[4] = 0x5a }, true)
	mutate("UDP checksum", func(_, udp, _ []byte) { binary.BigEndian.PutUint16(udp[6:], 0x1234) }, true)
	mutate("SE", func(_, _, pkt []byte) { pkt[1] ^= 0x80 }, false)
	mutate("UDP source port", func(_, udp, _ []byte) { udp[1]++ }, false)
	mutate("payload", func(_, _, pkt []byte) { pkt[40] ^= 1 }, false)
	mutate("IP ID", func(ip, _, _ []byte) { ip[5]++ }, false)
}
