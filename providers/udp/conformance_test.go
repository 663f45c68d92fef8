package udp

import (
	"testing"

	"vroce.dev/internal/providertest"
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
