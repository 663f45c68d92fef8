package vroce_test

import (
	"net/netip"
	"sync"
	"testing"

	"vroce.dev/vroce"
)

var registerTraitsTest sync.Once

// TestProviderNameAndTraits: one place resolves the provider a name
// selects, and a provider's traits answer for it before any device is
// open.
func TestProviderNameAndTraits(t *testing.T) {
	t.Setenv("VROCE_PROVIDER", "")
	if got := vroce.ProviderName(""); got != vroce.DefaultProvider {
		t.Fatalf("no name, no environment: %q, want %q", got, vroce.DefaultProvider)
	}
	t.Setenv("VROCE_PROVIDER", "sim")
	if got := vroce.ProviderName(""); got != "sim" {
		t.Fatalf("from the environment: %q", got)
	}
	if got := vroce.ProviderName("afxdp"); got != "afxdp" {
		t.Fatalf("a name given wins over the environment: %q", got)
	}
	registerTraitsTest.Do(func() {
		vroce.RegisterProviderWithTraits("traits-test", func(vroce.ProviderConfig) (vroce.Provider, error) { return nil, nil },
			vroce.ProviderTraits{DeviceAddr: func(peer netip.AddrPort) (string, error) { return "198.51.100.7:0", nil }, ProbesFromASocket: true})
	})
	peer := netip.MustParseAddrPort("198.51.100.1:4791")
	if addr, err := vroce.DeviceAddrFor("traits-test", peer); err != nil || addr != "198.51.100.7:0" {
		t.Fatalf("DeviceAddrFor: %q, %v", addr, err)
	}
	if !vroce.TraitsOf("traits-test").ProbesFromASocket {
		t.Fatal("TraitsOf lost a trait")
	}
	if addr, err := vroce.DeviceAddrFor("sim", peer); err != nil || addr != "" {
		t.Fatalf("a provider without a DeviceAddr trait: %q, %v, want its own default", addr, err)
	}
	if got := vroce.TraitsOf("not-linked"); got.DeviceAddr != nil || got.ProbesFromASocket {
		t.Fatalf("a provider not linked in has traits: %+v", got)
	}
}
