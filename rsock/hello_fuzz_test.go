package rsock

import "testing"

// FuzzParseStreamHello: the private data a peer sends at connection time
// parses to a sane offer or to an error, and a parsed one round-trips.
func FuzzParseStreamHello(f *testing.F) {
	f.Add(ourHello().marshal())
	f.Add([]byte{'r', 1, 0, 0, 0, 0, 0, 0})
	f.Add([]byte("vRCE"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := parseStreamHello(b)
		if err != nil {
			return
		}
		if h.window < 1 || h.bufSize < 1024 || h.bufSize > 1<<24 {
			t.Fatalf("accepted %+v", h)
		}
		again, err := parseStreamHello(h.marshal())
		if err != nil || again != h {
			t.Fatalf("round trip %+v -> %+v (%v)", h, again, err)
		}
	})
}
