package vroce

import "testing"

// A link's path MTU is the largest whose packets fit it whole, headers
// and ICRC included; an ordinary 1500-byte link (1472 bytes of UDP
// payload over IPv4, 1452 over IPv6) and a 1460-byte one take 1344.
func TestPathMTUForLink(t *testing.T) {
	for _, tc := range []struct {
		udpPayload int
		want       MTU
	}{
		{1472, MTU1344}, {1452, MTU1344}, {1432, MTU1344}, {1411, MTU1024},
		{1412, MTU1344}, {8972, MTU8192}, {4164, MTU4096}, {4163, MTU2048},
		{65507, MTU32768}, {600, MTU512},
	} {
		if got := mtuForLink(tc.udpPayload); got != tc.want {
			t.Errorf("%d bytes of UDP payload: %v, want %v", tc.udpPayload, got, tc.want)
		}
	}
}

// IB is what a peer without extensions is told: the largest IB MTU not
// above the path MTU.
func TestIBMTU(t *testing.T) {
	for m, want := range map[MTU]MTU{
		MTU256: MTU256, MTU512: MTU512, MTU1024: MTU1024, MTU1344: MTU1024, MTU2048: MTU2048,
		MTU4096: MTU4096, MTU8192: MTU4096, MTU32768: MTU4096,
	} {
		if got := m.IB(); got != want {
			t.Errorf("%v.IB() = %v, want %v", m, got, want)
		}
		if !m.Valid() {
			t.Errorf("%v not valid", m)
		}
	}
	if got := MTU(0).IB(); got != 0 {
		t.Errorf("MTU(0).IB() = %v, want 0: no IB MTU is below 256", got)
	}
	if MTU(1400).Valid() {
		t.Error("1400 taken for a path MTU")
	}
}
