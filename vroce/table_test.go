package vroce

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
)

type named struct{ name uint32 }

func newNamedTable() *table[named] { return newTable(func(n *named) uint32 { return n.name }) }

// put inserts n under the name it has, which must be free: insert would
// ask for another name for ever.
func put(t testing.TB, tb *table[named], n *named) {
	t.Helper()
	if tb.load(n.name) != nil {
		t.Fatalf("name %#x is taken", n.name)
	}
	tb.insert(n, func() bool { return true })
}

// TestTableMatchesAMap churns a table through growth, tombstones and
// rebuilds and checks every lookup against a plain map.
func TestTableMatchesAMap(t *testing.T) {
	tb := newNamedTable()
	ref := map[uint32]*named{}
	rng := rand.New(rand.NewPCG(1, 2))
	var names []uint32
	for step := range 200_000 {
		switch {
		case len(names) < 5000 && (len(names) == 0 || rng.IntN(3) != 0):
			k := rng.Uint32()
			if ref[k] != nil {
				continue
			}
			n := &named{k}
			put(t, tb, n)
			ref[k] = n
			names = append(names, k)
		default:
			i := rng.IntN(len(names))
			k := names[i]
			tb.delete(ref[k])
			delete(ref, k)
			names[i] = names[len(names)-1]
			names = names[:len(names)-1]
		}
		if step%1000 == 0 {
			for k, n := range ref {
				if got := tb.load(k); got != n {
					t.Fatalf("step %d: load(%#x) = %p, want %p", step, k, got, n)
				}
			}
		}
		if k := rng.Uint32(); tb.load(k) != ref[k] {
			t.Fatalf("step %d: load(%#x) of a name never stored = %p", step, k, tb.load(k))
		}
	}
	if tb.live != len(ref) {
		t.Fatalf("table counts %d entries, holds %d", tb.live, len(ref))
	}
	if ts := tb.slots.Load(); 4*tb.used > 3*len(ts.s) {
		t.Fatalf("%d of %d slots used: a probe for a missing name might not end", tb.used, len(ts.s))
	}
}

// TestTableDeleteLeavesOthers removes an entry that others probed past
// (all names share one home) and checks they are still found.
func TestTableDeleteLeavesOthers(t *testing.T) {
	tb := newNamedTable()
	put(t, tb, &named{0}) // sizes the table
	shift := tb.slots.Load().shift
	var same []*named // names whose probes start at slot 0
	for k := uint32(1); len(same) < 5; k++ {
		if (k*0x9e3779b1)>>shift == 0 {
			n := &named{k}
			put(t, tb, n)
			same = append(same, n)
		}
	}
	if !tb.delete(same[1]) || tb.delete(same[1]) {
		t.Fatal("delete did not report what the table held")
	}
	for i, n := range same {
		want := n
		if i == 1 {
			want = nil
		}
		if got := tb.load(n.name); got != want {
			t.Fatalf("load(%#x) = %p, want %p", n.name, got, want)
		}
	}
	again := &named{same[1].name}
	put(t, tb, again)
	if tb.load(again.name) != again {
		t.Fatal("a name removed and stored again is not found")
	}
}

// TestTableConcurrentReaders reads while a writer churns the table (run
// with -race): a lookup returns the object with that name or nothing, and
// the names that stay throughout are always found.
func TestTableConcurrentReaders(t *testing.T) {
	tb := newNamedTable()
	var stay []*named
	for k := range uint32(64) {
		n := &named{k<<20 | 1<<19}
		put(t, tb, n)
		stay = append(stay, n)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan string, 4)
	for r := range 3 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(r), 9))
			for i := 0; !stop.Load(); i++ {
				n := stay[i%len(stay)]
				if tb.load(n.name) != n {
					errs <- "a name stored before the readers began went missing"
					return
				}
				k := rng.Uint32() % 4096
				if p := tb.load(k); p != nil && p.name != k {
					errs <- "a lookup returned an object with another name"
					return
				}
			}
		})
	}
	rng := rand.New(rand.NewPCG(3, 4))
	var churn []*named
	for range 20_000 {
		if len(churn) < 1000 && rng.IntN(2) == 0 {
			k := rng.Uint32() % 4096 // never one of stay's names, which are all larger
			if tb.load(k) == nil {
				n := &named{k}
				put(t, tb, n)
				churn = append(churn, n)
			}
		} else if len(churn) > 0 {
			i := rng.IntN(len(churn))
			tb.delete(churn[i])
			churn[i] = churn[len(churn)-1]
			churn = churn[:len(churn)-1]
		}
	}
	stop.Store(true)
	wg.Wait()
	select {
	case e := <-errs:
		t.Fatal(e)
	default:
	}
}

// TestTableInsertPicksAFreeName: insert asks for names until one is both
// acceptable and free, and all returns exactly the entries held.
func TestTableInsertPicksAFreeName(t *testing.T) {
	tb := newNamedTable()
	first := &named{}
	put(t, tb, &named{7})
	candidates := []uint32{7, 0, 7, 9} // taken, refused, taken, free
	var asked int
	tb.insert(first, func() bool {
		first.name = candidates[asked]
		asked++
		return first.name != 0
	})
	if first.name != 9 || asked != 4 || tb.load(9) != first {
		t.Fatalf("inserted as %#x after %d names", first.name, asked)
	}
	got := map[uint32]bool{}
	for _, n := range tb.all() {
		got[n.name] = true
	}
	if len(got) != 2 || !got[7] || !got[9] {
		t.Fatalf("all returned %v, want 7 and 9", got)
	}
}

func BenchmarkTableLoad(b *testing.B) {
	tb := newNamedTable()
	var sm sync.Map
	var names []uint32
	for range 1000 {
		n := &named{rand.Uint32()}
		if tb.load(n.name) != nil {
			continue
		}
		put(b, tb, n)
		sm.Store(n.name, n)
		names = append(names, n.name)
	}
	b.Run("table", func(b *testing.B) {
		for i := range b.N {
			if tb.load(names[i%len(names)]) == nil {
				b.Fatal("missing")
			}
		}
	})
	b.Run("sync.Map", func(b *testing.B) {
		for i := range b.N {
			if _, ok := sm.Load(names[i%len(names)]); !ok {
				b.Fatal("missing")
			}
		}
	})
}
