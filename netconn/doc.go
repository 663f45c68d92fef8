// Package netconn is the net façade of vRoCE streams: it turns a transport
// stream that can block and be cancelled into a net.Conn with the exact
// semantics of Go's net package, so that code written for TCP runs
// unchanged.
//
//   - Deadlines: SetDeadline, SetReadDeadline and SetWriteDeadline may be
//     called at any time, from any goroutine; a deadline in the past
//     interrupts calls already blocked; a call that times out returns a
//     *net.OpError whose Timeout() is true and which wraps
//     os.ErrDeadlineExceeded, and leaves the connection usable.
//   - Errors are *net.OpError values naming the operation, network and
//     addresses; io.EOF stays bare, as net returns it; calls after Close
//     fail with net.ErrClosed.
//
// The transport implements Stream: Read and Write block until they can
// make progress or the cancel channel they are given is closed. rsock
// builds its connections with New. The package knows nothing of vRoCE.
package netconn
