package plugin

import (
	"github.com/hashicorp/go-plugin"
)

// ProtocolVersion numbers the control protocol (the calls and messages
// of control.go, and the credentials message that opens the descriptor
// socket). go-plugin refuses a plugin of another version, naming both.
// Version 2: TLS credentials from the host (mtls.go) instead of AutoMTLS.
const ProtocolVersion = 2

// handshake is go-plugin's guard against running a plugin binary by
// hand or as another program's plugin.
var handshake = plugin.HandshakeConfig{
	ProtocolVersion:  ProtocolVersion,
	MagicCookieKey:   "VROCE_PLUGIN_COOKIE",
	MagicCookieValue: "e1a5d0c6-vroce-provider",
}

// binaryPrefix is how a plugin binary is named: vroce-provider-NAME.
const binaryPrefix = "vroce-provider-"

// pluginName is the one plugin a provider binary serves.
const pluginName = "provider"

// seqpacketFD is where a plugin finds its end of the descriptor socket:
// the first extra file (cmd.ExtraFiles[0]).
const seqpacketFD = 3

// ringArea is each ring's area: room for a window of 9,000-byte packets
// and then some, touched only as it is used.
const ringArea = 2 << 20

// maxDatagram bounds a datagram on a ring: the largest packet a device
// makes.
const maxDatagram = 32768 + 128

// Description is what a plugin says of itself: in the hello, and as
// JSON from "vroce-provider-NAME describe".
type Description struct {
	// Name is the provider the plugin serves ("udp").
	Name string `json:"name"`
	// Version is the vroce.dev build the plugin was built from.
	Version string `json:"version"`
	// Protocols are the control protocol versions it serves.
	Protocols []int `json:"protocols"`
	// RingABI is the ring layout it maps (ring.ABIVersion).
	RingABI int `json:"ring_abi"`
	// Needs lists the capabilities it needs to run (CAP_NET_RAW, ...).
	Needs []string `json:"needs,omitempty"`
	// ProbesFromASocket and DeviceAddr mirror vroce.ProviderTraits: a
	// service reachable at its UDP address, and a provider that picks the
	// local address for a peer.
	ProbesFromASocket bool `json:"probes_from_a_socket,omitempty"`
	DeviceAddr        bool `json:"device_addr,omitempty"`
}

// The messages of the control calls, as JSON (control.go says why).
type (
	openRequest struct {
		ID      uint64 `json:"id"`
		Addr    string `json:"addr"`
		Options []byte `json:"options,omitempty"` // the provider's options as JSON
		Area    int    `json:"area"`
	}
	openReply struct {
		LocalAddr string `json:"local_addr"`
		MTU       int    `json:"mtu"`
		BatchSize int    `json:"batch_size"`
	}
	deviceRequest struct {
		ID uint64 `json:"id"`
	}
	statsReply struct {
		Dropped uint64 `json:"dropped"`
	}
	deviceAddrRequest struct {
		Peer string `json:"peer"`
	}
	deviceAddrReply struct {
		Addr string `json:"addr"`
	}
	// event is one message of the event stream.
	event struct {
		ID   uint64 `json:"id"`
		Kind string `json:"kind"` // eventFatal
		Err  string `json:"err,omitempty"`
	}
)

// eventFatal says a device's provider can never receive again.
const eventFatal = "fatal"
