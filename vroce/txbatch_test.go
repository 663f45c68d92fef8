package vroce

import (
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// aliased4K flags a payload whose copy would run 1-63 bytes ahead of
// itself modulo 4 KiB, and only that.
func TestAliased4K(t *testing.T) {
	mem := make([]byte, 3*4096)
	page := int(-uintptr(unsafe.Pointer(&mem[0])) & 4095) // the first page boundary in mem
	for _, c := range []struct {
		hl, at int // headers before the payload; its offset from a page
		want   bool
	}{
		{12, 0, true}, {16, 0, true}, {28, 0, true}, {63, 0, true}, {1, 0, true},
		{0, 0, false},    // header-less: destination and source alike
		{64, 0, false},   // a cache line or more ahead
		{16, 16, false},  // aligned to each other
		{16, 64, false},  // the source ahead of the destination
		{16, 4090, true}, // 22 bytes ahead, across the page
	} {
		body := mem[page+c.at : page+c.at+1024]
		if got := aliased4K(c.hl, body); got != c.want {
			t.Errorf("%d bytes of headers, payload %d bytes into a page: aliased %v, want %v", c.hl, c.at, got, c.want)
		}
	}
}

// layoutProvider is a sink that also keeps, for each Send, the packets
// as handed over: where their pieces lay in memory.
type layoutProvider struct {
	sinkProvider
	sends [][]Packet
}

func (p *layoutProvider) Send(pkts []Packet) error {
	p.mu.Lock()
	p.sends = append(p.sends, slices.Clone(pkts))
	p.mu.Unlock()
	return p.sinkProvider.Send(pkts)
}

// first returns the packets of the first Send.
func (p *layoutProvider) first(t *testing.T) []Packet {
	p.mu.Lock()
	defer p.mu.Unlock()
	require.NotEmpty(t, p.sends)
	return p.sends[0]
}

func addr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// Packets that may be coalesced lie end to end in their batch, so that
// the provider can hand the kernel a run of them as one piece: a copied
// payload's packet begins where the packet before it ends, a lent
// payload's headers where the tail of the packet before ends. The
// batch's first packet, and every packet of a QP whose packets may not
// be coalesced, start on 64 bytes (aliased4K says why).
func TestCoalescedPacketsLieEndToEnd(t *testing.T) {
	for _, c := range []struct {
		mtu            MTU
		lent, coalesce bool
	}{{MTU1024, false, true}, {MTU4096, true, true}, {MTU1024, false, false}, {MTU4096, true, false}} {
		p := &layoutProvider{sinkProvider: sinkProvider{done: make(chan struct{})}}
		qp, _, mr := rtsQP(t, p, c.mtu, true)
		const n = 16
		qp.mu.Lock()
		qp.req.cc.cwnd, qp.req.cc.slowStart = n, false
		qp.attr.SelectiveRepeat = c.coalesce // the one thing Coalesce follows
		wr := SendWR{Opcode: WRRDMAWrite, SGL: []SGE{mr.SGE(0, n*int(c.mtu))}, RemoteAddr: 0x1000, RKey: 7}
		require.NoError(t, qp.postOne(&wr))
		qp.kickAt(qp.dev.now())
		qp.mu.Unlock()

		pkts := p.first(t) // a loss probe may follow, late in a slow run
		require.Len(t, pkts, n)
		for i, pk := range pkts {
			require.Equal(t, c.coalesce, pk.Coalesce)
			require.Equal(t, c.lent, pk.Body != nil, "MTU %d: packet %d's payload lent", c.mtu, i)
			if i == 0 || !c.coalesce {
				assert.Zero(t, addr(pk.Data)&63, "MTU %d, coalesce %v: packet %d starts %d bytes past 64", c.mtu, c.coalesce, i, addr(pk.Data)&63)
				continue
			}
			before := pkts[i-1].Data
			if c.lent {
				before = pkts[i-1].Tail
				assert.Equal(t, addr(pk.Data)+uintptr(len(pk.Data)), addr(pk.Tail), "packet %d's tail follows its headers", i)
			}
			assert.Equal(t, addr(before)+uintptr(len(before)), addr(pk.Data), "MTU %d: packet %d begins where packet %d ends", c.mtu, i, i-1)
		}
	}
}

// joinLone copies an aliased lent payload in behind its headers when its
// packet is the batch's only one, keeping the packet's bytes; a payload
// that does not alias, or a batch of several, is left lent.
func TestJoinLoneMakesAnAliasedPayloadContiguous(t *testing.T) {
	mem := make([]byte, 6*4096)
	page := int(-uintptr(unsafe.Pointer(&mem[0])) & 4095)
	for i := range mem {
		mem[i] = byte(i * 7)
	}
	lone := func(at int) (*txBatch, []byte) {
		b := newTxBatch(4, packetSize(MTU4096))
		buf := b.buf()
		for i := range 24 {
			buf[i] = byte(200 + i) // 16 bytes of headers, then 8 of tail
		}
		body := mem[page+at : page+at+4096]
		b.pkts = append(b.pkts, Packet{Data: buf[:16:16], Body: body, Tail: buf[16:24]})
		want := b.pkts[0].AppendTo(nil)
		return b, want
	}

	b, want := lone(0)
	b.joinLone()
	if p := b.pkts[0]; p.Body != nil || p.Tail != nil || string(p.Data) != string(want) {
		t.Fatalf("a page-aligned payload behind 16 bytes of headers: body lent %v, %d bytes, same bytes %v",
			p.Body != nil, p.Len(), string(p.AppendTo(nil)) == string(want))
	}

	b, want = lone(256)
	b.joinLone()
	if p := b.pkts[0]; p.Body == nil || string(p.AppendTo(nil)) != string(want) {
		t.Fatal("a payload that does not alias was copied, or changed")
	}

	b, _ = lone(0)
	b.pkts = append(b.pkts, b.pkts[0])
	b.joinLone()
	if b.pkts[0].Body == nil {
		t.Fatal("a payload in a batch of two was copied")
	}
}

// The receive goroutine yields to what its batch woke only while few
// goroutines are runnable: queued behind many, it would hold up every
// stream of the device.
func TestYieldGateShutsWhenManyAreRunnable(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1)) // the goroutines below stay runnable until this one blocks
	var g yieldGate
	// Earlier tests' goroutines may still be winding down (CI once found
	// the gate shut here): yield to them until the run queue is short.
	opens := func() bool {
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); runtime.Gosched() {
			if g.open() {
				return true
			}
		}
		return false
	}
	if !opens() {
		t.Fatal("the gate is shut with nothing else to run")
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {})
	}
	open := g.open()
	wg.Wait()
	if open {
		t.Fatal("the gate is open with eight goroutines runnable")
	}
	if !opens() {
		t.Fatal("the gate stayed shut once they had run")
	}
}
