package preload

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRules(t *testing.T) {
	rules, err := ParseRules(strings.NewReader(`
# the first match decides
skip 10.0.0.5:22
skip :53          # any address
take 10.1.0.0/16
take [fd00::/8]:8000-8099
skip *
`))
	require.NoError(t, err)
	for addr, want := range map[string]bool{
		"10.0.0.5:22":          false,
		"10.0.0.5:80":          false, // skip *
		"10.9.9.9:53":          false,
		"10.1.2.3:22":          true,
		"[::ffff:10.1.2.3]:22": true, // IPv4-mapped is IPv4
		"[fd00::1]:8050":       true,
		"[fd00::1]:8100":       false,
		"192.0.2.1:443":        false,
	} {
		assert.Equal(t, want, decide(rules, netip.MustParseAddrPort(addr)), addr)
	}
	assert.True(t, decide(nil, netip.MustParseAddrPort("192.0.2.1:1")), "no rules: everything is taken over")

	for _, bad := range []string{"take", "maybe 10.0.0.1", "take 10.0.0.300", "take :0", "take :90-80", "take 10.0.0.1:x", "take a b"} {
		_, err := ParseRules(strings.NewReader(bad))
		assert.ErrorIs(t, err, ErrBadRule, bad)
	}
}

func FuzzParseRules(f *testing.F) {
	f.Add("skip 10.0.0.5:22\ntake [fd00::/8]:8000-8099\nskip *\n")
	f.Add("take :53 # dns\n")
	f.Fuzz(func(t *testing.T, text string) {
		rules, err := ParseRules(strings.NewReader(text))
		if err != nil {
			if !errors.Is(err, ErrBadRule) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		for _, r := range rules {
			if r.Lo > r.Hi {
				t.Fatalf("port range %d-%d", r.Lo, r.Hi)
			}
		}
		decide(rules, netip.MustParseAddrPort("10.0.0.1:80"))
	})
}
