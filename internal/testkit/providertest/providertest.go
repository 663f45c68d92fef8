package providertest

import (
	"sync/atomic"
	"testing"
	"time"

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
// memory only until its next Recv). Packets that do not come within 10 s
// fail the test: rx is closed then, to end the Recv that waits for them.
func Receive(t testing.TB, rx vroce.Provider, n, per int) []vroce.Packet {
	t.Helper()
	var timedOut atomic.Bool
	timer := time.AfterFunc(10*time.Second, func() {
		timedOut.Store(true)
		rx.Close()
	})
	defer timer.Stop()
	var got []vroce.Packet
	in := make([]vroce.Packet, per)
	for len(got) < n {
		for i := range in {
			in[i].Data = make([]byte, vroce.MaxPacketSize)
		}
		k, err := rx.Recv(in)
		if timedOut.Load() {
			t.Fatalf("%d of %d packets came within 10 s", len(got), n)
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range in[:k] {
			got = append(got, vroce.Packet{Data: append([]byte(nil), p.Data...), Addr: p.Addr})
		}
	}
	return got
}
