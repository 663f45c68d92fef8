// Package providertest holds checks every packet provider should pass,
// shared by the providers' own tests.
package providertest

import (
	"testing"

	"vroce.dev/vroce"
)

// AllocsPerBatch sends out from tx again and again, receiving each batch
// at rx in as many Recv calls as it takes, and returns the allocations one
// such round costs once warmed up (the first round may grow buffers and
// wait for a neighbour).
func AllocsPerBatch(t testing.TB, tx, rx vroce.Provider, out []vroce.Packet) float64 {
	t.Helper()
	in := make([]vroce.Packet, 64)
	bufs := make([][]byte, len(in))
	for i := range bufs {
		bufs[i] = make([]byte, vroce.MaxPacketSize)
	}
	round := func() {
		if err := tx.Send(out); err != nil {
			t.Fatal(err)
		}
		for got := 0; got < len(out); {
			for i := range in {
				in[i].Data = bufs[i]
			}
			n, err := rx.Recv(in)
			if err != nil {
				t.Fatal(err)
			}
			got += n
		}
	}
	round()
	return testing.AllocsPerRun(50, round)
}

// Receive takes n packets from rx, at most per in one Recv call, and
// returns copies of them in arrival order (a provider may lend a packet's
// memory only until its next Recv).
func Receive(t testing.TB, rx vroce.Provider, n, per int) []vroce.Packet {
	t.Helper()
	var got []vroce.Packet
	in := make([]vroce.Packet, per)
	for len(got) < n {
		for i := range in {
			in[i].Data = make([]byte, vroce.MaxPacketSize)
		}
		k, err := rx.Recv(in)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range in[:k] {
			got = append(got, vroce.Packet{Data: append([]byte(nil), p.Data...), Addr: p.Addr})
		}
	}
	return got
}
