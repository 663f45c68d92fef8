// Package preload runs unmodified programs over vRoCE: the daemon side
// of vroce-run (cmd/vroce-run, cmd/vroced) and the wire format it shares
// with the LD_PRELOAD interposer in preload/c (plain C, built by the
// Makefile with cc; the only C in the tree).
//
// The interposer leaves every socket the program's own real kernel
// socket until it connects or listens. Then it hands the socket to the
// daemon (SCM_RIGHTS over an abstract SOCK_SEQPACKET control socket whose
// peer uid the daemon checks):
//
//   - connect: the daemon connects the program's socket and dials over it
//     (rsock.Dialer.DialOver). A peer that does not speak vRoCE keeps that
//     socket as the connection, untouched. A vRoCE peer gets a stream,
//     bridged to one end of a socketpair whose other end the interposer
//     puts in place of the program's descriptor with dup3, having taken
//     the descriptor out of the program's epoll sets first and put it back
//     after with the same events and data.
//   - listen: the daemon serves the program's socket
//     (rsock.ListenConfig.Serve), which listens on it only once the vRoCE
//     service answers probes (a client that found the port open earlier
//     would be sent to TCP), and the program's descriptor becomes an
//     accept queue, a SOCK_SEQPACKET socketpair end: each message is one
//     accepted descriptor and its addresses. A socket the daemon does not
//     take, the program listens on itself.
//
// So epoll, poll, select, non-blocking I/O, fork, dup, shutdown and
// sendfile work on real descriptors with no interposition; the
// interposer answers getsockname, getpeername and the TCP socket options
// for the descriptors it swapped. protocol.go is the wire format; every
// message from the control socket is parsed by decodeRequest, fuzzed.
package preload
