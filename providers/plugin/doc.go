// Package plugin runs a packet provider in a process of its own:
// VROCE_PROVIDER=plugin:NAME (or plugin:/path/to/binary) opens devices
// whose packets a vroce-provider-NAME process moves.
//
// The parts, after DESIGN.md's "go-plugin is for control, never per
// packet":
//
//   - Control goes through hashicorp/go-plugin: the handshake (cookie,
//     versioned protocol), mutual TLS made fresh at each launch (as
//     AutoMTLS, but with Ed25519 certificates and the plugin's handed to
//     it on the descriptor socket: mtls.go says why), a managed client
//     that is killed at CleanupClients, and gRPC for a few calls
//     (control.go): hello, open and close a device, stats, the address to
//     reach a peer from, and a stream of events (a device failed).
//   - Packets cross in shared memory (package ring): each device has a
//     sealed memfd with a ring each way and four eventfd doorbells.
//     go-plugin passes no descriptors, so the host gives the plugin one end
//     of a SOCK_SEQPACKET socketpair as an extra file at launch and sends
//     the plugin's TLS credentials over it first, then each device's
//     descriptors (fdpass.go). Its hang-up is each
//     side's notice that the other died: the host then fails every device
//     the plugin served (their Recv returns an error wrapping
//     vroce.ErrProviderFailed) and starts a fresh plugin at the next Open;
//     a plugin whose host died exits.
//   - One plugin process per binary per host process (host.go), shared by
//     that process's devices. The host caches MTU, local address and batch
//     size; a device (device.go) is a vroce.Provider on the rings.
//
// A plugin binary is a few lines around Main (serve.go), which also
// answers "describe" with JSON. NAME resolves to vroce-provider-NAME in
// the directories of $VROCE_PLUGIN_DIR, then beside the running
// executable, never through $PATH (resolve.go); $VROCE_PLUGIN_SHA256 or
// Options.Checksum pins the binary.
package plugin
