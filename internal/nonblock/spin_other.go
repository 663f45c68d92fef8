//go:build !linux

package nonblock

import "runtime"

// Spin paces one busy poll; elsewhere than Linux it yields to the
// process's other goroutines only.
type Spin struct{}

// StartSpin begins a busy poll.
func StartSpin() Spin { return Spin{} }

// Yield is the pause between two looks.
func (Spin) Yield() { runtime.Gosched() }
