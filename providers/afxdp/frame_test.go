package afxdp

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"net/netip"
	"path/filepath"
	"testing"

	"vroce.dev/internal/pcap"
)

var (
	mac1, mac2 = [6]byte{2, 0, 0, 0, 0, 1}, [6]byte{2, 0, 0, 0, 0, 2}
	v4path     = path{srcMAC: mac1, dstMAC: mac2, src: netip.MustParseAddrPort("10.1.2.3:4791"), dst: netip.MustParseAddrPort("10.9.8.7:50000")}
	v6path     = path{srcMAC: mac1, dstMAC: mac2, src: netip.MustParseAddrPort("[fd00::1]:4791"), dst: netip.MustParseAddrPort("[fd00::2]:4791")}
)

func build(l path, payload []byte) []byte {
	h := headerLen(l.src.Addr().Is6())
	frame := make([]byte, h+len(payload))
	copy(frame[h:], payload)
	return frame[:writeHeaders(frame, &l, len(payload))]
}

// The headers writeHeaders builds parse back to what went in, for every
// payload length (odd ones exercise the checksum's last byte), and their
// checksums agree with internal/pcap's independent RFC 1071 code.
func TestFrameRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, l := range []path{v4path, v6path} {
		for n := 0; n < 300; n++ {
			payload := make([]byte, n)
			for i := range payload {
				payload[i] = byte(rng.Uint32())
			}
			frame := build(l, payload)
			d, err := parseFrame(frame)
			if err != nil {
				t.Fatalf("%v, %d bytes: %v", l.src, n, err)
			}
			if d.src != l.src || d.dst != l.dst || !bytes.Equal(d.payload, payload) {
				t.Fatalf("%v, %d bytes: parsed %v -> %v, %d bytes", l.src, n, d.src, d.dst, len(d.payload))
			}
			h := headerLen(l.src.Addr().Is6())
			ref := bytes.Clone(frame)
			pcap.FillChecksums(ref[ethHeader:h-udpHeader], ref[h-udpHeader:h], ref[h:])
			if !bytes.Equal(ref, frame) {
				t.Fatalf("%v, %d bytes: checksums differ from internal/pcap's:\n%x\n%x", l.src, n, frame[:h], ref[:h])
			}
		}
	}
}

// IPv4 frames carry ID 0 with DF set, as the udp provider's do, so the
// ICRC, which covers the IP header, matches on both.
func TestFrameIPv4IDZeroDF(t *testing.T) {
	f := build(v4path, []byte("x"))
	if id, flags := f[18:20], f[20]; id[0] != 0 || id[1] != 0 || flags != 0x40 {
		t.Fatalf("ID % x, flags %#x", id, flags)
	}
}

// Damage anywhere in the headers or payload is caught, with a typed error.
func TestFrameDamageRejected(t *testing.T) {
	for _, l := range []path{v4path, v6path} {
		frame := build(l, []byte("a vRoCE packet, more or less"))
		h := headerLen(l.src.Addr().Is6())
		for i := ethHeader; i < len(frame); i++ {
			if l.src.Addr().Is6() && (i >= ethHeader+1 && i < ethHeader+4 || i == ethHeader+7) {
				continue // traffic class, flow label and hop limit: no checksum covers them
			}
			bad := bytes.Clone(frame)
			bad[i] ^= 0x10
			d, err := parseFrame(bad)
			var fe FrameError
			if err == nil {
				t.Fatalf("%v: byte %d (header ends at %d) flipped, parsed %v -> %v", l.src, i, h, d.src, d.dst)
			}
			if !errors.As(err, &fe) {
				t.Fatalf("error %T is not a FrameError", err)
			}
		}
	}
}

func TestFrameRejects(t *testing.T) {
	good := build(v4path, []byte("payload"))
	cases := map[string]struct {
		frame []byte
		want  error
	}{
		"empty":      {nil, errShort},
		"arp":        {append(bytes.Clone(good[:12]), 0x08, 0x06, 0, 1), errEtherType},
		"truncated":  {good[:ethHeader+10], errShort},
		"fragment":   {withIPv4(good, func(ip []byte) { ip[6] |= 0x20 }), errFragment},
		"tcp":        {withIPv4(good, func(ip []byte) { ip[9] = 6 }), errNotUDP},
		"ihl 4":      {withIPv4(good, func(ip []byte) { ip[0] = 0x44 }), errIPHeader},
		"ip too big": {withIPv4(good, func(ip []byte) { ip[3] += 40 }), errIPHeader},
	}
	for name, c := range cases {
		if _, err := parseFrame(c.frame); err != c.want {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
	// A zero UDP checksum means none, over IPv4 and, as rdma_rxe sends
	// it, over IPv6.
	zero := bytes.Clone(good)
	zero[40], zero[41] = 0, 0
	zero6 := build(v6path, []byte("p"))
	zero6[60], zero6[61] = 0, 0
	for _, f := range [][]byte{zero, zero6} {
		if _, err := parseFrame(f); err != nil {
			t.Errorf("zero UDP checksum: %v", err)
		}
	}
	// Ethernet pads short frames to 60 bytes; the IP length decides.
	padded := append(bytes.Clone(good), make([]byte, 20)...)
	if d, err := parseFrame(padded); err != nil || string(d.payload) != "payload" {
		t.Errorf("padded frame: %q, %v", d.payload, err)
	}
}

// withIPv4 changes an IPv4 frame's header and fixes its checksum, so that
// the change itself is what is tested.
func withIPv4(frame []byte, change func(ip []byte)) []byte {
	f := bytes.Clone(frame)
	ip := f[ethHeader : ethHeader+ipv4Header]
	change(ip)
	ip[10], ip[11] = 0, 0
	c := fold(sum(ip, 0))
	ip[10], ip[11] = byte(c>>8), byte(c)
	return f
}

// Frames Linux's Soft-RoCE put on a real wire parse, and agree with the
// capture decoder about addresses and payload.
func TestFrameParsesRxeCaptures(t *testing.T) {
	files, _ := filepath.Glob("../../vroce/wire/testdata/rxe-pcaps/*.pcap")
	if len(files) == 0 {
		t.Fatal("no rxe captures")
	}
	n := 0
	for _, f := range files {
		dgs, err := pcap.ReadUDP(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, dg := range dgs {
			d, err := parseFrame(dg.Raw)
			if err != nil {
				t.Fatalf("%s: %v", filepath.Base(f), err)
			}
			if !bytes.Equal(d.payload, dg.Payload) || d.dst.Port() != dg.DstPort || d.src.Port() != dg.SrcPort {
				t.Fatalf("%s: parsed %v -> %v, %d bytes; capture says %d -> %d, %d bytes",
					filepath.Base(f), d.src, d.dst, len(d.payload), dg.SrcPort, dg.DstPort, len(dg.Payload))
			}
			n++
		}
	}
	t.Logf("%d frames from %d captures", n, len(files))
}

// FuzzParseFrame: any bytes give a datagram or a FrameError, never a
// panic; a datagram found rebuilds into a frame that parses the same.
func FuzzParseFrame(f *testing.F) {
	f.Add(build(v4path, []byte("seed")))
	f.Add(build(v6path, []byte("seed six")))
	f.Add([]byte{})
	files, _ := filepath.Glob("../../vroce/wire/testdata/rxe-pcaps/*.pcap")
	for _, file := range files[:min(len(files), 3)] {
		dgs, _ := pcap.ReadUDP(file)
		for _, dg := range dgs[:min(len(dgs), 4)] {
			f.Add(dg.Raw)
		}
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		d, err := parseFrame(frame)
		if err != nil {
			var fe FrameError
			if !errors.As(err, &fe) {
				t.Fatalf("error %T", err)
			}
			return
		}
		if d.src.Addr().Is4() != d.dst.Addr().Is4() {
			t.Fatalf("mixed families %v -> %v", d.src, d.dst)
		}
		again, err := parseFrame(build(path{src: d.src, dst: d.dst}, d.payload))
		if err != nil || again.src != d.src || again.dst != d.dst || !bytes.Equal(again.payload, d.payload) {
			t.Fatalf("rebuilt frame: %v", err)
		}
	})
}
