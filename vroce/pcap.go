package vroce

import (
	"bufio"
	"net/netip"
	"os"
	"sync"
	"time"

	"vroce.dev/internal/pcap"
	"vroce.dev/vroce/wire"
)

// pcapRecorder writes every frame a device sends and receives, framed in
// synthetic Ethernet/IP/UDP headers (the provider may have none), so that
// Wireshark and tshark decode the capture as RoCEv2.
type pcapRecorder struct {
	mu sync.Mutex
	f  *os.File
	bw *bufio.Writer
	w  *pcap.Writer
}

func newPcapRecorder(path string) (*pcapRecorder, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	bw := bufio.NewWriterSize(f, 1<<16)
	w, err := pcap.NewWriter(bw)
	if err != nil {
		f.Close()
		return nil, err
	}
	return &pcapRecorder{f: f, bw: bw, w: w}, nil
}

func (r *pcapRecorder) record(flow wire.Flow, pkt []byte) {
	var hb [wire.MaxHeaderSpace]byte
	if flow.Dst.Addr().IsUnspecified() && flow.Src.Addr().Unmap().Is4() {
		// A device listening on all addresses does not know which of them a
		// datagram was sent to; record 0.0.0.0 rather than drop the frame.
		flow.Dst = netip.AddrPortFrom(netip.IPv4Unspecified(), flow.Dst.Port())
	}
	ip, udp, ok := flow.Headers(&hb, len(pkt))
	if !ok {
		return
	}
	pcap.FillChecksums(ip, udp, pkt)
	var eb [14]byte
	r.mu.Lock()
	_ = r.w.WriteFrame(time.Now(), pcap.EthernetHeader(&eb, ip), ip, udp, pkt)
	r.mu.Unlock()
}

func (r *pcapRecorder) close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	err := r.bw.Flush()
	if cerr := r.f.Close(); err == nil {
		err = cerr
	}
	return err
}
