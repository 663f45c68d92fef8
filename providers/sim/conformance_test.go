package sim

import (
	"net/netip"
	"testing"

	"vroce.dev/internal/testkit/providertest"
	"vroce.dev/vroce"
)

func TestProviderConformance(t *testing.T) {
	providertest.Run(t, func(t *testing.T) (vroce.Provider, vroce.Provider) {
		n := NewNetwork(Config{})
		t.Cleanup(n.Close)
		a, err := n.Attach(netip.MustParseAddrPort("10.0.0.1:4791"))
		if err != nil {
			t.Fatal(err)
		}
		b, err := n.Attach(netip.MustParseAddrPort("10.0.0.2:4791"))
		if err != nil {
			t.Fatal(err)
		}
		return a, b
	}, func(_ *testing.T, p vroce.Provider) { p.(*Endpoint).Break() })
}
