package udp

import (
	"net/netip"
	"os"
	"testing"

	"golang.org/x/sys/unix"

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
	}, breakSocket)
}

// breakSocket puts /dev/null where the provider's socket was (dup3 over
// its descriptor): a receive finds no socket there (ENOTSOCK), as after
// any fault that leaves the descriptor useless, while the runtime's
// poller still holds a valid descriptor.
func breakSocket(t *testing.T, p vroce.Provider) {
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	rc, err := p.(*Provider).Conn().SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var dupErr error
	if err := rc.Control(func(fd uintptr) { dupErr = unix.Dup3(int(null.Fd()), int(fd), unix.O_CLOEXEC) }); err != nil || dupErr != nil {
		t.Fatalf("dup3 over the socket: %v, %v", err, dupErr)
	}
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
