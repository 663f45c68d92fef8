//go:build linux

package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"time"

	"vroce.dev/vroce"
)

func init() {
	vroce.RegisterProviderFamily("plugin", open, traits)
}

func open(cfg vroce.ProviderConfig) (vroce.Provider, error) {
	path, err := resolve(cfg.Target)
	if err != nil {
		return nil, err
	}
	var opts Options
	switch o := cfg.Options.(type) {
	case Options:
		opts = o
	case *Options:
		if o != nil {
			opts = *o
		}
	default:
		opts.Provider = o
	}
	sum, err := checksumOf(opts.Checksum)
	if err != nil {
		return nil, err
	}
	var provOpts []byte
	if opts.Provider != nil {
		if provOpts, err = json.Marshal(opts.Provider); err != nil {
			return nil, fmt.Errorf("vroce plugin %s: options %T do not cross to another process: %w", path, opts.Provider, err)
		}
	}
	p, err := processFor(path, sum)
	if err != nil {
		return nil, err
	}
	return p.open(cfg.Addr, provOpts)
}

// traits asks the plugin what its provider is, starting it if it does
// not run; a plugin that will not start has no traits (and Open will
// say why).
func traits(target string) vroce.ProviderTraits {
	path, err := resolve(target)
	if err != nil {
		return vroce.ProviderTraits{}
	}
	sum, err := checksumOf("")
	if err != nil {
		return vroce.ProviderTraits{}
	}
	p, err := processFor(path, sum)
	if err != nil {
		return vroce.ProviderTraits{}
	}
	t := vroce.ProviderTraits{ProbesFromASocket: p.desc.ProbesFromASocket}
	if p.desc.DeviceAddr {
		t.DeviceAddr = func(peer netip.AddrPort) (string, error) {
			ctx, cancel := context.WithTimeout(context.Background(), controlTimeout)
			defer cancel()
			var rep deviceAddrReply
			err := p.ctl.call(ctx, "DeviceAddr", deviceAddrRequest{Peer: peer.String()}, &rep)
			return rep.Addr, err
		}
	}
	return t
}

// Cleanup stops every plugin process this program started and waits
// until they are gone; devices still open on them fail. A program that
// opened plugin devices calls it before it exits (a plugin whose host
// dies exits by itself, but a host that exits through os.Exit after
// Cleanup leaves nothing behind even for a moment).
func Cleanup() {
	processes.Lock()
	ps := processes.m
	processes.m = nil
	processes.Unlock()
	for _, p := range ps {
		// Hanging up the descriptor socket asks the plugin to close its
		// devices and exit; watch then sees it go and reaps it.
		p.fds.CloseWrite()
		select {
		case <-p.gone:
		case <-time.After(2 * time.Second):
			p.client.Kill()
			<-p.gone
		}
	}
}
