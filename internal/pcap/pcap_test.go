package pcap_test

import (
	"bytes"
	"errors"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"vroce.dev/internal/pcap"
	"vroce.dev/vroce/wire"
)

func TestWriterOutputReadsBackWithSyntheticHeaders(t *testing.T) {
	for _, flow := range []wire.Flow{
		{Src: netip.MustParseAddrPort("127.0.0.1:49152"), Dst: netip.MustParseAddrPort("127.0.0.2:4791")},
		{Src: netip.MustParseAddrPort("[::1]:49152"), Dst: netip.MustParseAddrPort("[fd00::2]:4791")},
	} {
		var file bytes.Buffer
		w, err := pcap.NewWriter(&file)
		if err != nil {
			t.Fatal(err)
		}
		payload := []byte("0123456789abcdef")
		var hb [wire.MaxHeaderSpace]byte
		ip, udp, ok := flow.Headers(&hb, len(payload))
		if !ok {
			t.Fatal("no headers")
		}
		pcap.FillChecksums(ip, udp, payload)
		var eb [14]byte
		ts := time.Unix(1700000000, 123456789)
		if err := w.WriteFrame(ts, pcap.EthernetHeader(&eb, ip), ip, udp, payload); err != nil {
			t.Fatal(err)
		}
		r, err := pcap.NewReader(&file)
		if err != nil {
			t.Fatal(err)
		}
		frame, got, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		if !got.Equal(ts) {
			t.Errorf("timestamp %v, want %v", got, ts)
		}
		d, ok := pcap.DecodeUDP(frame)
		if !ok || !bytes.Equal(d.Payload, payload) || d.SrcPort != 49152 || d.DstPort != 4791 {
			t.Fatalf("%v: decoded %+v, ok=%v", flow, d, ok)
		}
		if _, _, err := r.Next(); err != io.EOF {
			t.Fatalf("after the last frame: %v, want io.EOF", err)
		}
	}
}

func TestReaderRejectsBadFiles(t *testing.T) {
	for name, b := range map[string][]byte{
		"empty":     nil,
		"bad magic": make([]byte, 24),
	} {
		if _, err := pcap.NewReader(bytes.NewReader(b)); !errors.Is(err, pcap.ErrFormat) {
			t.Errorf("%s: %v, want ErrFormat", name, err)
		}
	}
}

func FuzzDecodeUDP(f *testing.F) {
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, frame []byte) {
		d, ok := pcap.DecodeUDP(frame)
		if ok && len(d.UDPHeader) != 8 {
			t.Fatalf("UDP header of %d bytes", len(d.UDPHeader))
		}
	})
}

func FuzzReader(f *testing.F) {
	var file bytes.Buffer
	w, _ := pcap.NewWriter(&file)
	_ = w.WriteFrame(time.Unix(1, 0), []byte("frame"))
	f.Add(file.Bytes())
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := pcap.NewReader(bytes.NewReader(b))
		if err != nil {
			return
		}
		for i := 0; i < 100; i++ {
			if _, _, err := r.Next(); err != nil {
				return
			}
		}
	})
}

func TestReadUDPSaysWhereAndWhenEachDatagramWas(t *testing.T) {
	path := filepath.Join(t.TempDir(), "two.pcap")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := pcap.NewWriter(f)
	if err != nil {
		t.Fatal(err)
	}
	flow := wire.Flow{Src: netip.MustParseAddrPort("10.0.0.1:49152"), Dst: netip.MustParseAddrPort("10.0.0.2:4791")}
	t0 := time.Unix(1700000000, 5000)
	var sizes []int
	for i, n := range []int{16, 40} {
		payload := make([]byte, n)
		var hb [wire.MaxHeaderSpace]byte
		ip, udp, _ := flow.Headers(&hb, n)
		var eb [14]byte
		eth := pcap.EthernetHeader(&eb, ip)
		if err := w.WriteFrame(t0.Add(time.Duration(i)*time.Millisecond), eth, ip, udp, payload); err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, len(eth)+len(ip)+len(udp)+n)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	ds, err := pcap.ReadUDP(path)
	if err != nil || len(ds) != 2 {
		t.Fatalf("read %d datagrams, %v", len(ds), err)
	}
	const fileHdr, recordHdr = 24, 16
	wantOff := []int64{fileHdr, fileHdr + recordHdr + int64(sizes[0])}
	for i, d := range ds {
		if d.Offset != wantOff[i] || !d.Time.Equal(t0.Add(time.Duration(i)*time.Millisecond)) {
			t.Errorf("datagram %d at offset %d, time %v; want %d, %v", i, d.Offset, d.Time, wantOff[i], t0.Add(time.Duration(i)*time.Millisecond))
		}
	}
	// From the second record's offset, only the second datagram.
	from, err := pcap.ReadUDPFrom(path, wantOff[1])
	if err != nil || len(from) != 1 {
		t.Fatalf("from offset %d: %d datagrams, %v", wantOff[1], len(from), err)
	}
	if from[0].Offset != wantOff[1] || !bytes.Equal(from[0].Raw, ds[1].Raw) || !from[0].Time.Equal(ds[1].Time) {
		t.Errorf("from offset %d: datagram at %d, %d bytes; want the second, %d bytes", wantOff[1], from[0].Offset, len(from[0].Raw), len(ds[1].Raw))
	}
}
