// Package rsock carries TCP-style byte streams over vRoCE RC queue pairs,
// behind net.Conn and net.Listener: swap net.Dial for rsock.Dial and
// net.Listen for rsock.Listen, and a program's bytes move over vRoCE with
// TCP's semantics (ordering, half-close, deadlines, errors).
//
//	import _ "vroce.dev/providers/udp"     // the provider the program links
//
//	ln, _ := rsock.Listen("tcp", ":9000")   // http.Serve(ln, handler) works
//	c, _ := rsock.Dial("tcp", "host:9000") // c.(interface{ Transport() string })
//
// rsock imports no provider: nothing above vroce's provider seam knows
// which one runs. A program without one gets an error naming the import.
//
// A stream is one RC QP. Its receive buffers come from an SRQ that every
// stream of the device shares; a stream may fill only as many of them as
// its reader has granted (credits, returned as the application reads), so
// a slow reader holds back only its own peer. Data moves as SENDs with
// immediate data that also carries credits back; control (credits alone,
// FIN, RST, keepalive) needs no receive buffer of its own. A write within
// the device's inline limit (DeviceAttr.MaxInline, 256 bytes in vroce)
// that the peer has a credit for leaves inline, holding no buffer and
// asking for no completion.
//
// Connection modes: SOCKET (default) probes the service's UDP port
// (an IB CM service ID resolution on QP1) while it connects over TCP; a
// vRoCE service gets the QP exchange on that TCP connection, which then
// closes, and any other server keeps the TCP connection, untouched, as
// the stream (Transport "tcp"; RSOCK_FALLBACK=0 or Dialer.NoFallback
// makes that an error). A listener serves vRoCE clients of both modes and
// plain TCP clients on one port. RDMA_CM mode (RSOCK_MODE=cm) uses the
// in-band connection manager alone. A listener's device receives on the
// UDP port equal to its TCP port; a dialer's on an ephemeral port. A port
// given opens for TCP last, once the device answers probes for it, so a
// dialer that finds it open is not told that no vRoCE service is there.
//
// A program's own sockets can be handed in: ListenConfig.Serve serves an
// open *net.TCPListener as Listen serves its own port (one not yet
// listening, it listens on last if bound, as Listen does, and first if
// not, to be given a port), and Dialer.DialOver
// makes a stream of an established *net.TCPConn (or keeps it as the
// connection, for a peer that does not speak vRoCE); vroce-run's daemon is
// meant to use both.
//
// Close never blocks: what was written is sent, then a FIN, in the
// background, for at most ten seconds; SetLinger(0) resets instead, as
// does closing with data unread. Drain waits for background closes, for a
// program about to exit. Keepalive (Dialer.KeepAlive, 15 s by default)
// finds a dead peer; a device's streams are looked at a quarter of the
// shortest period apart, and not at all while none keeps alive, so an
// idle program sleeps. A stream grants its peer 16 messages of up to 64 KiB.
//
// A reader waiting for data, and a writer waiting for credits, receives
// for the device meanwhile (vroce.Signal), so the packet that brings its
// data or credit wakes it directly, and netconn's deadlines interrupt
// that receive. A Conn is an
// io.ReaderFrom and io.WriterTo: io.Copy reads straight into registered
// send buffers and writes straight from the receive buffers (copy.go).
//
// Where things are: stream.go is a stream's two halves and its lifecycle,
// whose states (named after TCP's: ESTABLISHED, FIN_WAIT_1, ...) and
// transitions are streamstate.go's; protocol.go the messages and the
// connection hello; stack.go a device's shared machinery and its lifetime,
// with buffers.go (registered buffers, the SRQ top-up), poll.go
// (completions to streams) and keepalive.go beside it; dial.go and
// listen.go the two connection modes and the TCP fallback (conn.go).
package rsock
