package preload

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"vroce.dev/rsock"
)

// options are the flags vroce-run takes and hands on to vroced: one
// definition, one check (config), one way across (args).
type options struct {
	mode       string
	noFallback bool
	ports      string
	rules      string
	provider   string
}

func (o *options) define(fs *flag.FlagSet) {
	fs.StringVar(&o.mode, "mode", rsock.ModeSocket, "how connections are made: socket (the program's TCP connection carries the QP exchange) or cm (RDMA_CM: no TCP to a vRoCE peer)")
	fs.BoolVar(&o.noFallback, "no-fallback", false, "refuse connections to peers that do not speak vRoCE (ECONNREFUSED)")
	fs.StringVar(&o.ports, "ports", "", "comma-separated ports to take over (default all)")
	fs.StringVar(&o.rules, "rules", "", "a rules file: which addresses to take over, the first matching line deciding (take|skip ADDRESS: 10.0.0.0/8, :6379, [fd00::1]:80-89, *)")
	fs.StringVar(&o.provider, "provider", "", "packet provider (default $VROCE_PROVIDER, then udp)")
}

// config checks the options and makes a daemon's Config of them.
func (o options) config() (Config, error) {
	cfg := Config{Mode: o.mode, NoFallback: o.noFallback, Provider: o.provider}
	if o.mode != rsock.ModeSocket && o.mode != rsock.ModeCM {
		return cfg, fmt.Errorf("--mode %q: socket or cm", o.mode)
	}
	for _, p := range strings.Split(o.ports, ",") {
		if p == "" {
			continue
		}
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil {
			return cfg, fmt.Errorf("--ports: %q: %v", p, err)
		}
		cfg.Ports = append(cfg.Ports, uint16(n))
	}
	if o.rules != "" {
		f, err := os.Open(o.rules)
		if err != nil {
			return cfg, err
		}
		defer f.Close()
		if cfg.Rules, err = ParseRules(f); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}

// args are the options as vroced's flags; a rules file is named by its
// absolute path, since vroced may run elsewhere.
func (o options) args() ([]string, error) {
	args := []string{"--mode", o.mode, "--ports", o.ports, "--provider", o.provider}
	if o.noFallback {
		args = append(args, "--no-fallback")
	}
	if o.rules != "" {
		abs, err := filepath.Abs(o.rules)
		if err != nil {
			return nil, err
		}
		args = append(args, "--rules", abs)
	}
	return args, nil
}
