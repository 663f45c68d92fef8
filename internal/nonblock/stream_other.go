//go:build !linux

package nonblock

import (
	"errors"
	"syscall"
)

// Stream is Linux's; elsewhere NewStream says so and callers keep their
// conn.
type Stream struct{}

// NewStream reports errors.ErrUnsupported.
func NewStream(c syscall.Conn) (*Stream, error) { return nil, errors.ErrUnsupported }

func (s *Stream) Read(b []byte) (int, error)                { return 0, errors.ErrUnsupported }
func (s *Stream) Write(b []byte) (int, error)               { return 0, errors.ErrUnsupported }
func (s *Stream) WriteBuffers(bufs [][]byte) (int64, error) { return 0, errors.ErrUnsupported }
