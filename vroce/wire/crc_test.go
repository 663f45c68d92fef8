package wire

import (
	"bytes"
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

// updateIEEE agrees with the standard library for every length up to
// and around the fold's block and threshold (so the short path too), at
// every alignment, from any CRC.
func TestUpdateIEEEMatchesStandardLibrary(t *testing.T) {
	t.Logf("256-bit fold: %v; 128-bit fold: %v; short path: %v; the standard library's 512-bit path from %d bytes: %v", haveFold256, haveFold128, haveShortCRC, stdlib512Min, haveStdlib512)
	rng := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 9000)
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	var lengths []int
	for n := 0; n <= foldMin+3*foldBlock+17; n++ {
		lengths = append(lengths, n)
	}
	lengths = append(lengths, 1024, 4096, 4096+17, 8191, 8192)
	for _, n := range lengths {
		for _, off := range []int{0, 1, 7, 31} {
			p := buf[off : off+n]
			crc := rng.Uint32()
			want := crc32.Update(crc, crc32.IEEETable, p)
			if got := updateIEEE(crc, p); got != want {
				t.Fatalf("length %d at offset %d from %08x: %08x, want %08x", n, off, crc, got, want)
			}
			// The folds themselves, where the dispatch would not choose them.
			for name, fold := range folds(n) {
				if got := fold(crc, p); got != want {
					t.Fatalf("%s: length %d at offset %d from %08x: %08x, want %08x", name, n, off, crc, got, want)
				}
			}
		}
	}
}

// updateLane agrees with the standard library for every length it takes,
// from any CRC, and with bth (for a BTH and what follows it) counts resv8a,
// the fifth byte, as ones.
func TestUpdateLaneMatchesStandardLibrary(t *testing.T) {
	if !haveShortCRC {
		t.Skip("updateLane needs PCLMULQDQ and SSSE3, which this CPU lacks")
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for n := 4; n <= 16; n++ {
		for range 50 {
			p := make([]byte, n)
			for i := range p {
				p[i] = byte(rng.Uint32())
			}
			crc := rng.Uint32()
			if got, want := updateLane(crc, p, false), crc32.Update(crc, crc32.IEEETable, p); got != want {
				t.Fatalf("length %d from %08x: %08x, want %08x", n, crc, got, want)
			}
			if n < BTHLen {
				continue
			}
			masked := bytes.Clone(p)
			masked[4] = 0xff
			if got, want := updateLane(crc, p, true), crc32.Update(crc, crc32.IEEETable, masked); got != want {
				t.Fatalf("BTH, length %d from %08x: %08x, want %08x", n, crc, got, want)
			}
		}
	}
}

// copyUpdateIEEE copies exactly its source, no byte past it, and returns
// the standard library's CRC of it, for the same lengths and alignments
// (source and destination misaligned apart too).
func TestCopyUpdateIEEECopiesAndMatches(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	src := make([]byte, 9100)
	for i := range src {
		src[i] = byte(rng.Uint32())
	}
	dst := make([]byte, len(src)+64)
	var lengths []int
	for n := 0; n <= foldMin+3*foldBlock+17; n++ {
		lengths = append(lengths, n)
	}
	lengths = append(lengths, 1024, 1344, 4096, 4096+17, 8191, 8192)
	for _, n := range lengths {
		for _, off := range [][2]int{{0, 0}, {1, 0}, {0, 7}, {31, 5}} {
			p, d := src[off[0]:off[0]+n], dst[off[1]:]
			crc := rng.Uint32()
			want := crc32.Update(crc, crc32.IEEETable, p)
			for name, copyCRC := range copyingFolds(n) {
				for i := range dst {
					dst[i] = 0xa5
				}
				if got := copyCRC(crc, d, p); got != want {
					t.Fatalf("%s: length %d at offsets %v from %08x: %08x, want %08x", name, n, off, crc, got, want)
				}
				if !bytes.Equal(d[:n], p) {
					t.Fatalf("%s: length %d at offsets %v: the copy differs", name, n, off)
				}
				if d[n] != 0xa5 || (off[1] > 0 && dst[off[1]-1] != 0xa5) {
					t.Fatalf("%s: length %d at offsets %v: a byte outside the copy was written", name, n, off)
				}
			}
		}
	}
}

// folds are the folds this CPU can run on n bytes, named, whether or not
// updateIEEE would choose them.
func folds(n int) map[string]func(uint32, []byte) uint32 {
	f := map[string]func(uint32, []byte) uint32{}
	if haveFold256 && n >= foldBlock {
		f["fold256"] = updateFold256
	}
	return f
}

// copyingFolds are copyUpdateIEEE and the copying folds this CPU can run
// on n bytes, named, whether or not copyUpdateIEEE would choose them.
func copyingFolds(n int) map[string]func(uint32, []byte, []byte) uint32 {
	f := map[string]func(uint32, []byte, []byte) uint32{"dispatch": copyUpdateIEEE}
	if haveFold256 && n >= foldBlock {
		f["fold256"] = copyFold256
	}
	if haveFold128 && n >= fold128Block {
		f["fold128"] = copyFold128
	}
	return f
}

func FuzzCopyUpdateIEEE(f *testing.F) {
	f.Add(uint32(0), make([]byte, 600))
	f.Add(uint32(0xffffffff), make([]byte, 1344))
	f.Fuzz(func(t *testing.T, crc uint32, p []byte) {
		want := crc32.Update(crc, crc32.IEEETable, p)
		d := make([]byte, len(p))
		for name, copyCRC := range copyingFolds(len(p)) {
			clear(d)
			if got := copyCRC(crc, d, p); got != want || !bytes.Equal(d, p) {
				t.Fatalf("%s: length %d from %08x: %08x, want %08x (copied equal: %v)", name, len(p), crc, got, want, bytes.Equal(d, p))
			}
		}
	})
}

func FuzzUpdateIEEE(f *testing.F) {
	f.Add(uint32(0), make([]byte, 600))
	f.Add(uint32(0xffffffff), make([]byte, 4096))
	f.Fuzz(func(t *testing.T, crc uint32, p []byte) {
		want := crc32.Update(crc, crc32.IEEETable, p)
		if got := updateIEEE(crc, p); got != want {
			t.Fatalf("length %d from %08x: %08x, want %08x", len(p), crc, got, want)
		}
		for name, fold := range folds(len(p)) {
			if got := fold(crc, p); got != want {
				t.Fatalf("%s: length %d from %08x: %08x, want %08x", name, len(p), crc, got, want)
			}
		}
	})
}

// BenchmarkUpdateIEEEShort is a small packet's CRC: 80 bytes, a 64-byte
// SEND with its BTH and ICRC.
func BenchmarkUpdateIEEEShort(b *testing.B) {
	p := make([]byte, 80)
	b.Run("wire", func(b *testing.B) {
		for b.Loop() {
			updateIEEE(0, p)
		}
	})
	b.Run("slicing8", func(b *testing.B) {
		for b.Loop() {
			updateSlicing8(0, p)
		}
	})
	b.Run("stdlib", func(b *testing.B) {
		for b.Loop() {
			crc32.Update(0, crc32.IEEETable, p)
		}
	})
}

// BenchmarkCopyAndCRC is a 1344-byte payload copied into a packet and
// its ICRC computed: as dispatched, by each copying fold, or a copy and
// then the CRC. As a 64 KiB WRITE's packets are, the payloads are cut in
// turn from a 64 KiB buffer into a batch's worth of packets, so neither
// side is all in the first-level cache.
func BenchmarkCopyAndCRC(b *testing.B) {
	const payload, packet = 1344, 1400
	src, dst := make([]byte, 64<<10), make([]byte, 64*packet)
	apart := func(crc uint32, d, s []byte) uint32 {
		n := copy(d, s)
		return updateIEEE(crc, d[:n])
	}
	ways := copyingFolds(payload)
	ways["apart"] = apart
	for _, name := range []string{"dispatch", "fold256", "fold128", "apart"} {
		copyCRC, ok := ways[name]
		if !ok {
			continue
		}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(payload)
			from, to := 0, 0
			for b.Loop() {
				copyCRC(0, dst[to:to+payload], src[from:from+payload])
				if from += payload; from+payload > len(src) {
					from = 0
				}
				if to += packet; to+packet > len(dst) {
					to = 0
				}
			}
		})
	}
}

func BenchmarkUpdateIEEE4K(b *testing.B) {
	p := make([]byte, 4096)
	b.SetBytes(int64(len(p)))
	b.Run("wire", func(b *testing.B) {
		b.SetBytes(int64(len(p)))
		for b.Loop() {
			updateIEEE(0, p)
		}
	})
	b.Run("stdlib", func(b *testing.B) {
		b.SetBytes(int64(len(p)))
		for b.Loop() {
			crc32.Update(0, crc32.IEEETable, p)
		}
	})
}
