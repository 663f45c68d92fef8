//go:build !linux

package afxdp

import (
	"errors"

	"vroce.dev/vroce"
)

// Provider is unavailable outside Linux: AF_XDP is a Linux socket family.
type Provider struct{ vroce.Provider }

// ErrUnsupported is what Open returns outside Linux.
var ErrUnsupported = errors.New("afxdp: AF_XDP needs Linux")

// Open fails outside Linux.
func Open(addr string, opts Options) (*Provider, error) { return nil, ErrUnsupported }

// Stats is empty outside Linux.
func (p *Provider) Stats() Stats { return Stats{} }
