package vroce

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"sort"
	"strings"
	"sync"
	"time"
)

// Packet is one datagram crossing a Provider: a whole RoCEv2 packet (BTH to
// ICRC) and the peer it goes to or came from.
type Packet struct {
	// Data holds the packet. On Recv the caller passes buffers that hold
	// the largest packet its MTU allows (MaxPacketSize at most), and the
	// provider shortens Data to what arrived,
	// or lends memory of its own instead (a segment of a coalesced
	// datagram, say), valid until the next Recv: the device is done with
	// every packet of a batch before it asks for the next. It changes
	// only the packets it returns (or delivers): the device sets back
	// just those.
	Data []byte
	// Addr is the destination on Send and the source on Recv.
	Addr netip.AddrPort
	// Body and Tail, on Send, continue Data: the packet is Data, then
	// Body, then Tail. A large payload travels in Body straight from the
	// application's registered memory, so that the kernel's copy is its
	// only one (unless that copy would be slow: see joinLone); Tail then
	// holds the pad and ICRC. A provider reads both during Send and keeps
	// neither. Recv leaves them empty.
	Body, Tail []byte
	// Coalesce, on Send, says the receiver is vRoCE: a provider may send
	// the packet together with its neighbours of the same size to the same
	// address as one segmented datagram (UDP GSO). The kernel then numbers
	// the IPv4 IDs of the segments, which a vRoCE receiver ignores (it
	// rebuilds the header the ICRC covers) and rdma_rxe would not.
	Coalesce bool
}

// Len is the length of the whole packet: Data, Body and Tail.
func (p *Packet) Len() int { return len(p.Data) + len(p.Body) + len(p.Tail) }

// AppendTo appends the whole packet to b: for a provider that copies
// packets rather than gathering them.
func (p *Packet) AppendTo(b []byte) []byte {
	return append(append(append(b, p.Data...), p.Body...), p.Tail...)
}

// MaxPacketSize bounds a packet at the largest path MTU: headers, 32,768
// bytes of payload (an extension MTU), pad and ICRC. A device sizes its
// own buffers by its active MTU (packetSize).
const MaxPacketSize = int(MTU32768) + packetHeadroom

// packetHeadroom is what a packet holds besides its payload, with room
// to spare: BTH, the largest extension headers, a SACK or PiggyACK
// trailer, pad and ICRC.
const packetHeadroom = 128

// packetSize is the largest packet a path MTU of mtu makes.
func packetSize(mtu MTU) int { return int(mtu) + packetHeadroom }

// Provider moves packets for one device. It is the only seam between the
// transport and the network: udp, afxdp, sim and plugin live below it and
// nothing above it knows which one runs. Like wireguard-go's conn.Bind it is
// batch-oriented so that a provider can use recvmmsg, sendmmsg, GSO and GRO.
//
// Recv and Send may be called concurrently with each other and Send from
// several goroutines at once.
type Provider interface {
	// Recv blocks until at least one packet arrives, fills pkts from the
	// front and returns how many. After Close it returns net.ErrClosed;
	// once it can never receive again, an error wrapping
	// ErrProviderFailed.
	Recv(pkts []Packet) (int, error)
	// Send sends every packet in pkts. A datagram the network drops is not
	// an error; a closed provider or an unusable address is.
	Send(pkts []Packet) error
	// LocalAddr is the address peers send this device's packets to. Its IP
	// may be unspecified when the provider listens on all addresses.
	LocalAddr() netip.AddrPort
	// MTU is the largest UDP payload the link carries without
	// fragmentation; the device derives its active path MTU from it.
	MTU() int
	// BatchSize is how many packets one Recv or Send call handles well.
	BatchSize() int
	// Close releases the provider and wakes a blocked Recv.
	Close() error
}

// BatchReceiver is a Provider that can also hand the device batch after
// batch from inside one call: a provider whose every Recv must first ask
// the kernel (or the ring) whether anything is there may know, inside
// such a loop, that it need not (see the udp provider). The device then
// calls RecvEach instead of Recv.
//
// The whole upper stack runs inside deliver: the engine answers what a
// batch brought (ACKs, READ responses, the next requests of a window that
// opened), completion handlers run, and rsock streams take their data, all
// before deliver returns. So Send is re-entered from inside RecvEach, on
// the receiving goroutine, and a BatchReceiver must allow it (it may not
// hold a lock Send takes while it calls deliver). That is a measured
// choice: handing each batch to another goroutine to answer cost a
// wake-up per batch, the largest share of a ping-pong's latency.
type BatchReceiver interface {
	Provider
	// RecvEach receives into pkts as Recv does and calls deliver with how
	// many arrived, batch after batch, until deliver returns false (then
	// it returns nil) or it fails as Recv would. A batch's packets are
	// valid until deliver returns; the provider may change pkts between
	// batches. Packets received but not yet delivered when it returns
	// (segments of a coalesced datagram) go to the next Recv or RecvEach.
	RecvEach(pkts []Packet, deliver func(n int) (more bool)) error
}

// RecvInterrupter is a Provider whose blocked receive another goroutine
// can cut short. With one, the device lets a goroutine that waits for
// completions receive for itself instead of being woken by the device's
// receive goroutine (see receiveTurn): the packet then wakes the goroutine
// that needs it, with no hand-off between two.
type RecvInterrupter interface {
	Provider
	// InterruptRecv makes a Recv or RecvEach blocked now, or the next one
	// to start, return soon without error: Recv with no packets, RecvEach
	// with nil. It may be called from any goroutine, at any time.
	InterruptRecv()
}

// UDPChecksummer is a Provider that sends every datagram with a UDP
// checksum and delivers only those whose checksum was verified on the
// way in (by the kernel or the NIC): the checksum then covers the whole
// RoCE packet end to end, as TCP's covers a stream. Two devices on such
// providers may agree to leave the ICRC out (QPAttr.UDPChecksum), a CRC
// over every payload at each end that adds nothing against corruption
// there.
type UDPChecksummer interface {
	Provider
	// VerifiesUDPChecksum reports whether the provider does so.
	VerifiesUDPChecksum() bool
}

// DropCounter is a Provider that drops some datagrams before the device
// sees them (larger than any packet, say) and counts them; the device
// reports the count (DeviceStats.RxProviderDrops).
type DropCounter interface {
	Provider
	// Dropped is how many datagrams the provider has dropped so far.
	Dropped() uint64
}

// ProviderConfig is what Open passes to a provider's constructor.
type ProviderConfig struct {
	// Addr is the local address to receive on, "host:port". Empty means
	// the provider's default (all addresses, port 4791 for udp).
	Addr string
	// Options carries provider-specific settings (for example the
	// *sim.Network to attach to); providers document what they accept.
	Options any
	// Target is what followed the colon when the provider was named
	// "FAMILY:TARGET" (for "plugin:udp", "udp"): which member of a
	// family of providers (RegisterProviderFamily) to open.
	Target string
}

// OptionsAs is a provider's view of ProviderConfig.Options: a T or a *T
// as given, a T decoded from JSON (json.RawMessage), the zero T when
// there are none, and otherwise an error that names the provider and the
// type it wants.
func OptionsAs[T any](provider string, options any) (T, error) {
	var zero T
	switch o := options.(type) {
	case nil:
		return zero, nil
	case T:
		return o, nil
	case *T:
		if o != nil {
			return *o, nil
		}
		return zero, nil
	case json.RawMessage:
		// Options that crossed from another process (providers/plugin).
		if len(o) == 0 {
			return zero, nil
		}
		var t T
		if err := json.Unmarshal(o, &t); err != nil {
			return zero, fmt.Errorf("%s: options %s: %w", provider, o, err)
		}
		return t, nil
	}
	return zero, fmt.Errorf("%s: options of type %T: want %T", provider, options, zero)
}

// BusyPollFromEnv is $VROCE_BUSY_POLL: how long a provider's receive
// that finds nothing keeps looking before it sleeps (0 when unset). Every
// provider that polls reads it here.
func BusyPollFromEnv() (time.Duration, error) {
	v := os.Getenv("VROCE_BUSY_POLL")
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("VROCE_BUSY_POLL=%q: want a duration such as 50us", v)
	}
	return d, nil
}

// OpenProviderFunc creates a provider from its configuration.
type OpenProviderFunc func(ProviderConfig) (Provider, error)

// ProviderTraits are what a provider says of itself before any device of
// its is open: what a layer above the seam (rsock, cm) would otherwise
// have to know by the provider's name.
type ProviderTraits struct {
	// DeviceAddr is the address ("host:port") to open a device on that
	// will reach peer, when the caller names none. Nil leaves
	// ProviderConfig.Addr empty: the provider's own default.
	DeviceAddr func(peer netip.AddrPort) (string, error)
	// ProbesFromASocket says a vRoCE service is reached at its UDP
	// address, so it can be probed from a plain UDP socket before any
	// device exists (a closed port then answers at once).
	ProbesFromASocket bool
}

var registry struct {
	sync.Mutex
	m      map[string]OpenProviderFunc
	traits map[string]func(target string) ProviderTraits
}

// RegisterProvider makes a provider available to Open by name. Providers
// call it from init, so a program links only the providers it imports.
func RegisterProvider(name string, open OpenProviderFunc) {
	RegisterProviderWithTraits(name, open, ProviderTraits{})
}

// RegisterProviderWithTraits is RegisterProvider for a provider that says
// what it is (ProviderTraits).
func RegisterProviderWithTraits(name string, open OpenProviderFunc, traits ProviderTraits) {
	RegisterProviderFamily(name, open, func(string) ProviderTraits { return traits })
}

// RegisterProviderFamily registers a family of providers, each named
// "name:TARGET" (the plugin provider: "plugin:udp", "plugin:/opt/x"):
// open finds the target in ProviderConfig.Target, and traits says what
// the target's provider is, which may take starting it.
func RegisterProviderFamily(name string, open OpenProviderFunc, traits func(target string) ProviderTraits) {
	registry.Lock()
	defer registry.Unlock()
	if registry.m == nil {
		registry.m, registry.traits = map[string]OpenProviderFunc{}, map[string]func(string) ProviderTraits{}
	}
	if _, dup := registry.m[name]; dup {
		panic("vroce: provider " + name + " registered twice")
	}
	registry.m[name], registry.traits[name] = open, traits
}

// splitProviderName splits "FAMILY:TARGET" into its family, under which
// the provider is registered, and its target.
func splitProviderName(name string) (family, target string) {
	if i := strings.IndexByte(name, ':'); i > 0 {
		return name[:i], name[i+1:]
	}
	return name, ""
}

// Providers lists the registered provider names.
func Providers() []string {
	registry.Lock()
	defer registry.Unlock()
	names := make([]string, 0, len(registry.m))
	for n := range registry.m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// DefaultProvider is the provider a device uses when nothing names one.
const DefaultProvider = "udp"

// ProviderName is the provider that name selects: name itself, else
// $VROCE_PROVIDER, else DefaultProvider. Every layer that picks a
// provider asks here, so the default is decided in one place.
func ProviderName(name string) string {
	if name == "" {
		name = os.Getenv("VROCE_PROVIDER")
	}
	if name == "" {
		name = DefaultProvider
	}
	return name
}

// TraitsOf returns what the provider name selects says of itself (the
// zero ProviderTraits for one not linked in, whose Open will say so).
func TraitsOf(name string) ProviderTraits {
	family, target := splitProviderName(ProviderName(name))
	registry.Lock()
	traits := registry.traits[family]
	registry.Unlock()
	if traits == nil {
		return ProviderTraits{}
	}
	return traits(target)
}

// DeviceAddrFor is the address to open a device of provider name on to
// reach peer when the caller names none: the provider's choice, or ""
// for its default.
func DeviceAddrFor(name string, peer netip.AddrPort) (string, error) {
	if f := TraitsOf(name).DeviceAddr; f != nil {
		return f(peer)
	}
	return "", nil
}

// OpenProvider opens the provider name selects (see ProviderName) by
// itself, without a device: for a program that serves one to another
// process (providers/plugin). Open is the usual way.
func OpenProvider(name string, cfg ProviderConfig) (Provider, error) {
	family, target := splitProviderName(ProviderName(name))
	registry.Lock()
	open := registry.m[family]
	registry.Unlock()
	if open == nil {
		return nil, fmt.Errorf("vroce: provider %q is not linked into this program (have %v; import vroce.dev/providers/%s)", family, Providers(), family)
	}
	cfg.Target = target
	return open(cfg)
}
