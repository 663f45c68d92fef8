package vroce

import (
	"errors"
	"fmt"
)

// Errors callers can test with errors.Is.
var (
	// ErrLimit is wrapped by every *LimitError.
	ErrLimit = errors.New("resource limit exceeded")
	// ErrClosed is returned by operations on a closed device or object.
	ErrClosed = errors.New("vroce: closed")
	// ErrInvalid is wrapped by errors about malformed arguments.
	ErrInvalid = errors.New("invalid argument")
	// ErrState is wrapped by errors about an operation the QP's state
	// does not allow.
	ErrState = errors.New("invalid QP state")
	// ErrQueueFull is returned when a work queue has no room.
	ErrQueueFull = errors.New("work queue full")
	// ErrCQOverflow is returned by Poll once a CQ has overflowed.
	ErrCQOverflow = errors.New("vroce: completion queue overflow")
	// ErrBusy is returned when destroying an object still in use.
	ErrBusy = errors.New("resource busy")
	// ErrProviderFailed is wrapped by a provider's Recv error once it can
	// never receive again (its interface is gone, say). The device then
	// reports EventDeviceFatal and fails its QPs.
	ErrProviderFailed = errors.New("vroce: packet provider failed")
)

// LimitError reports a request beyond a device limit: which limit, what was
// asked for and what the device allows. It wraps ErrLimit.
type LimitError struct {
	Op    string // "create QP", "create CQ", …
	Limit string // the limit's name in SPEC.md terms: "max_send_wr", …
	Value int    // what was asked for
	Max   int    // the device's limit
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("vroce: %s: %s %d exceeds device limit %d", e.Op, e.Limit, e.Value, e.Max)
}

func (e *LimitError) Unwrap() error { return ErrLimit }

func checkLimit(op, limit string, value, max int) error {
	if value > max {
		return &LimitError{Op: op, Limit: limit, Value: value, Max: max}
	}
	return nil
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf("vroce: %s: %w", fmt.Sprintf(format, args...), ErrInvalid)
}

func statef(format string, args ...any) error {
	return fmt.Errorf("vroce: %s: %w", fmt.Sprintf(format, args...), ErrState)
}

func busyf(format string, args ...any) error {
	return fmt.Errorf("vroce: %s: %w", fmt.Sprintf(format, args...), ErrBusy)
}
