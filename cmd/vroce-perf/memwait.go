package main

import (
	"context"

	"vroce.dev/internal/nonblock"
	"vroce.dev/vroce"
)

// perftest's ib_write_lat learns that a WRITE arrived the way programs on
// a hardware RNIC do: it spins on the last byte of the buffer the peer
// writes into, since a plain WRITE leaves no completion. vRoCE's "RNIC"
// is goroutines of this process, so an end that spins must also let the
// device receive: awaitByte waits on a Signal, which receives for the
// device while it waits (the packet that brings the byte is handled on
// the waiting goroutine), and a second goroutine spins on the byte and
// notifies the Signal once it holds the value wanted.
//
// The spinner yields to the kernel between looks (nonblock.Spin), not
// only to Go's scheduler: between two processes on two cores, each
// spinning with runtime.Gosched, the threads that receive for the two
// devices waited for a CPU, and 2,000 round trips of ib_write_lat's 2
// bytes took 800-1,100 retransmissions and 20-30 timeouts (105-161 and
// none yielding so; typical latency 57 and 55 us, average 420 and
// 110-140).

// loadByte reads *b as a CPU reads memory a NIC writes: with no ordering
// against the engine's write of it, which the race detector would report.
// Only the byte's value is used, never the bytes the same WRITE put
// before it, which nothing orders against this read.
//
//go:norace
func loadByte(b *byte) byte { return *b }

// awaitByte returns once *b == want, or with ctx's error once ctx ends.
func awaitByte(ctx context.Context, sig *vroce.Signal, b *byte, want byte) error {
	for loadByte(b) != want {
		if err := ctx.Err(); err != nil {
			return err
		}
		stop, spun := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(spun)
			spin := nonblock.StartSpin()
			for loadByte(b) != want {
				select {
				case <-stop:
					return
				case <-ctx.Done():
					sig.Notify() // a waiter receiving sees its cancel only when woken
					return
				default:
				}
				spin.Yield()
			}
			sig.Notify()
		}()
		// A notice left over from an earlier wait ends this one early:
		// the loop looks at the byte again.
		sig.Wait(ctx.Done())
		close(stop)
		<-spun
	}
	return nil
}
