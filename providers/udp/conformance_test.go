package udp

import (
	"net/netip"
	"testing"

	"vroce.dev/internal/testkit/providertest"
	"vroce.dev/vroce"
)

func TestProviderConformance(t *testing.T) {
	providertest.Run(t, func(t *testing.T) (vroce.Provider, vroce.Provider) {
		a, err := Listen("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		b, err := Listen("127.0.0.1:0")
		if err != nil {
			a.Close()
			t.Fatal(err)
		}
		return a, b
	})
}

// A device for a peer opens on the address the route to it leaves from.
func TestDeviceAddrIsTheRoutesSource(t *testing.T) {
	addr, err := vroce.DeviceAddrFor("udp", netip.MustParseAddrPort("127.0.0.1:4791"))
	if err != nil || addr != "127.0.0.1:0" {
		t.Fatalf("device address for a loopback peer: %q, %v", addr, err)
	}
	if !vroce.TraitsOf("udp").ProbesFromASocket {
		t.Fatal("udp services are probed from a socket of their own")
	}
}
