package rsock

import (
	"errors"
	"io"
	"net"

	"vroce.dev/netconn"
)

// The stream copies once per direction when the other end is an
// io.Reader or io.Writer (io.Copy, rsock-proxy, a bridge): the Conn's
// ReadFrom reads straight into a registered send buffer (CopyFrom), and
// its WriteTo writes straight from the receive buffers the data arrived
// in (CopyTo). Through Read and Write, io.Copy's own buffer is a second
// copy.

var (
	_ netconn.StreamReaderFrom = (*stream)(nil)
	_ netconn.StreamWriterTo   = (*stream)(nil)
)

// maxGather is how many received messages CopyTo hands w at once
// (net.Buffers: one writev for a TCP socket).
const maxGather = 16

// buffersWriter is a writer that takes several buffers in one call (a
// writev; internal/nonblock's Stream), as net.Buffers.WriteTo does for
// the net package's own conns only: CopyTo hands it what arrived, a
// message a buffer.
type buffersWriter interface {
	WriteBuffers(bufs [][]byte) (int64, error)
}

// CopyTo implements netconn.StreamWriterTo: it writes what arrives to w
// until the peer's FIN (then a nil error) or a failure.
func (s *stream) CopyTo(w io.Writer, cancel <-chan struct{}) (int64, error) {
	var total int64
	var taken [maxGather]chunk
	// bufs is set to the whole of views each time: a write consumes it
	// from the front, and appending to what is left would allocate.
	var views [maxGather][]byte
	var bufs net.Buffers
	for {
		s.mu.Lock()
		if err := s.awaitDataLocked(cancel); err != nil {
			s.mu.Unlock()
			if err == io.EOF {
				err = nil
			}
			return total, err
		}
		// Taken out of the queue, the chunks are this call's: other
		// readers read what follows, as they would after a Read.
		n := 0
		for n < len(taken) && s.rq.Len() > 0 {
			taken[n] = s.rq.Pop()
			n++
		}
		s.passOnLocked()
		s.mu.Unlock()

		bufs = views[:0]
		for i := range n {
			bufs = append(bufs, taken[i].data)
		}
		var written int64
		var err error
		if bw, ok := w.(buffersWriter); ok {
			written, err = bw.WriteBuffers(bufs)
		} else {
			written, err = bufs.WriteTo(w)
		}
		total += written

		s.mu.Lock()
		s.bytesIn += uint64(written)
		for i := range n {
			s.consumedLocked(&taken[i])
		}
		s.grantDueLocked()
		s.mu.Unlock()
		if err != nil {
			return total, err
		}
	}
}

// CopyFrom implements netconn.StreamReaderFrom: it sends what r yields
// until io.EOF (then a nil error) or a failure.
func (s *stream) CopyFrom(r io.Reader, cancel <-chan struct{}) (int64, error) {
	var total int64
	// Reads take a small buffer until one fills it, and a large one
	// until one does not fill a small one: requests and responses stay
	// small, a bulk copy moves 64 KiB messages.
	small := true
	for {
		s.mu.Lock()
		// Wait until nothing is pending, so that the next buffer, read
		// into, is sent as it is.
		for {
			if err := s.writableLocked(); err != nil {
				s.mu.Unlock()
				return total, err
			}
			if s.pending == nil || s.pending.n == 0 {
				break
			}
			if !s.awaitCreditLocked(cancel) {
				s.mu.Unlock()
				return total, netconn.ErrCanceled
			}
		}
		get := s.st.getBuf
		if small {
			get = s.st.getSmallBuf
		}
		peerBuf := s.peerBuf
		s.mu.Unlock()
		b, err := get()
		if err != nil {
			return total, err
		}
		size := min(peerBuf, len(b.data))

		n, rerr := r.Read(b.data[:size])
		small = n < smallBufSize
		if n > 0 {
			s.mu.Lock()
			var werr error
			if err := s.writableLocked(); err != nil {
				werr = err
			} else if s.pending == nil || s.pending.n == 0 {
				if s.pending != nil {
					s.st.putBuf(s.pending)
				}
				b.n, s.pending, b = n, b, nil
				s.bytesOut += uint64(n)
				s.sendPendingLocked()
			} else {
				// A Write filled the pending buffer meanwhile: ours
				// goes after it, copied.
				_, werr = s.writeLocked(b.data[:n], cancel)
			}
			s.mu.Unlock()
			if werr != nil {
				s.st.putBuf(b)
				return total, werr
			}
			total += int64(n)
		}
		if b != nil {
			s.st.putBuf(b)
		}
		switch {
		case errors.Is(rerr, io.EOF):
			return total, nil
		case rerr != nil:
			return total, rerr
		}
	}
}
