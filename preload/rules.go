package preload

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
)

// Rule says whether connections to (connect) or on (listen) matching
// addresses are taken over by vRoCE or left to TCP.
//
// A rules file (vroce-run --rules FILE) has one rule a line, the first
// that matches deciding, and everything that matches none taken over:
//
//	# comments and blank lines are ignored
//	skip 10.0.0.5:22        # one address and port
//	skip :53                # a port on any address
//	take 10.1.0.0/16        # a network, any port
//	take 10.2.0.0/16:8000-8099
//	skip *                  # everything else stays on TCP
type Rule struct {
	Take   bool
	Prefix netip.Prefix // invalid: any address
	Lo, Hi uint16       // the port range; 0, 0: any port
}

// ErrBadRule is wrapped by every error of a rules file.
var ErrBadRule = errors.New("vroced: bad rule")

// ParseRules reads a rules file.
func ParseRules(r io.Reader) ([]Rule, error) {
	var rules []Rule
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		rule, err := parseRule(f)
		if err != nil {
			return nil, fmt.Errorf("%w: line %d: %q: %v", ErrBadRule, n, strings.TrimSpace(line), err)
		}
		rules = append(rules, rule)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadRule, err)
	}
	return rules, nil
}

func parseRule(f []string) (Rule, error) {
	var r Rule
	if len(f) != 2 {
		return r, errors.New("want: take|skip ADDRESS")
	}
	switch f[0] {
	case "take":
		r.Take = true
	case "skip":
	default:
		return r, fmt.Errorf("%q is not take or skip", f[0])
	}
	spec := f[1]
	if spec == "*" {
		return r, nil
	}
	host, ports := splitSpec(spec)
	if host != "" && host != "*" {
		p, err := netip.ParsePrefix(host)
		if err != nil {
			a, aerr := netip.ParseAddr(host)
			if aerr != nil {
				return r, fmt.Errorf("address %q: want an address or a network", host)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		r.Prefix = p.Masked()
	}
	if ports != "" {
		lo, hi, found := strings.Cut(ports, "-")
		l, err := strconv.ParseUint(lo, 10, 16)
		if err != nil || l == 0 {
			return r, fmt.Errorf("port %q", lo)
		}
		h := l
		if found {
			if h, err = strconv.ParseUint(hi, 10, 16); err != nil || h < l {
				return r, fmt.Errorf("port range %q", ports)
			}
		}
		r.Lo, r.Hi = uint16(l), uint16(h)
	}
	return r, nil
}

// splitSpec splits an address spec into host (an address or network;
// empty or * for any) and ports: HOST, HOST:PORTS, :PORTS, [V6]:PORTS;
// an IPv6 HOST without brackets has no port.
func splitSpec(spec string) (host, ports string) {
	if rest, ok := strings.CutPrefix(spec, "["); ok {
		host, ports, _ = strings.Cut(rest, "]")
		return host, strings.TrimPrefix(ports, ":")
	}
	if strings.Count(spec, ":") == 1 {
		host, ports, _ = strings.Cut(spec, ":")
		return host, ports
	}
	return spec, ""
}

// matches says whether a is one of the rule's addresses.
func (r Rule) matches(a netip.AddrPort) bool {
	if r.Prefix.IsValid() && !r.Prefix.Contains(a.Addr().Unmap()) {
		return false
	}
	return r.Lo == 0 || a.Port() >= r.Lo && a.Port() <= r.Hi
}

// decide is what the rules say of a: the first that matches decides;
// none matching, it is taken over.
func decide(rules []Rule, a netip.AddrPort) bool {
	for _, r := range rules {
		if r.matches(a) {
			return r.Take
		}
	}
	return true
}
