package afxdp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"

	"vroce.dev/vroce"
)

func init() {
	// A device for any peer: its interface's address, any free port.
	anyPort := func(netip.AddrPort) (string, error) { return ":0", nil }
	vroce.RegisterProviderWithTraits("afxdp", func(cfg vroce.ProviderConfig) (vroce.Provider, error) {
		opts, err := vroce.OptionsAs[Options]("afxdp", cfg.Options)
		if err != nil {
			return nil, err
		}
		if os.Getenv("VROCE_XDP_MODE") == "generic" {
			opts.Generic = true
		}
		return Open(cfg.Addr, opts)
	}, vroce.ProviderTraits{DeviceAddr: anyPort})
}

// DefaultPort is RoCEv2's UDP port.
const DefaultPort = 4791

// Options configures an AF_XDP provider.
type Options struct {
	// Iface names the network interface; empty means $VROCE_IFACE.
	Iface string
	// Generic attaches the XDP program in generic (skb) mode even where
	// the driver runs XDP itself: slower, for a driver whose own XDP
	// misbehaves. $VROCE_XDP_MODE=generic does the same.
	Generic bool
}

// Stats counts what the provider did; the kernel's own drops are included.
type Stats struct {
	Queues    int  // sockets, one per receive queue
	Generic   bool // the XDP program runs in generic (skb) mode
	ZeroCopy  bool // the driver maps the UMEM itself
	RxPackets uint64
	// RxPerQueue is RxPackets by the queue they arrived on.
	RxPerQueue []uint64
	// RxInvalid counts frames the XDP program passed that were not vRoCE
	// datagrams for this device: bad checksums, other addresses.
	RxInvalid uint64
	// RxBadChecksum counts the invalid frames whose IP or UDP checksum was
	// wrong. On a veth this means the peer offloads checksums and hands
	// over packets whose checksum is still partial: turn it off there
	// (ethtool -K PEER tx off); a real NIC completes it on the wire.
	RxBadChecksum uint64
	TxPackets     uint64
	// TxNoFrame counts packets dropped because every TX frame was in
	// flight for too long (a stalled link); the transport resends them.
	TxNoFrame uint64
	// Unresolved counts packets dropped because their next hop's MAC could
	// not be resolved, or the route left by another interface.
	Unresolved uint64
	// KernelRxDropped is what the kernel dropped for lack of room in a
	// ring or of a fill-ring frame (XDP_STATISTICS).
	KernelRxDropped uint64
}

// ErrNoInterface means neither Options.Iface nor $VROCE_IFACE names one.
var ErrNoInterface = errors.New("afxdp: no interface: set VROCE_IFACE or afxdp.Options.Iface")

// localAddr picks the device's address on ifi from addr ("host:port",
// empty for every address and port 4791).
func localAddr(ifi *net.Interface, addr string) (netip.AddrPort, error) {
	host, port := "", strconv.Itoa(DefaultPort)
	if addr != "" {
		var err error
		if host, port, err = net.SplitHostPort(addr); err != nil {
			return netip.AddrPort{}, fmt.Errorf("afxdp: address %q: %w", addr, err)
		}
	}
	pn, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("afxdp: address %q: bad port", addr)
	}
	var want netip.Addr
	if host != "" {
		if want, err = netip.ParseAddr(host); err != nil {
			return netip.AddrPort{}, fmt.Errorf("afxdp: address %q: want an IP address: %w", addr, err)
		}
		want = want.Unmap()
	}
	addrs, err := ifi.Addrs()
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("afxdp: addresses of %s: %w", ifi.Name, err)
	}
	var first netip.Addr
	for _, a := range addrs {
		pfx, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		ip, ok := netip.AddrFromSlice(pfx.IP)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		if want.IsValid() && !want.IsUnspecified() {
			if ip == want {
				return netip.AddrPortFrom(ip, uint16(pn)), nil
			}
			continue
		}
		if ip.IsLinkLocalUnicast() || want.IsValid() && want.Is4() != ip.Is4() {
			continue
		}
		if !first.IsValid() || first.Is6() && ip.Is4() {
			first = ip
		}
	}
	if !first.IsValid() {
		if want.IsValid() && !want.IsUnspecified() {
			return netip.AddrPort{}, fmt.Errorf("afxdp: %v is not an address of %s", want, ifi.Name)
		}
		return netip.AddrPort{}, fmt.Errorf("afxdp: %s has no IP address", ifi.Name)
	}
	return netip.AddrPortFrom(first, uint16(pn)), nil
}

func ifaceName(o Options) (string, error) {
	if o.Iface != "" {
		return o.Iface, nil
	}
	if n := os.Getenv("VROCE_IFACE"); n != "" {
		return n, nil
	}
	return "", ErrNoInterface
}
