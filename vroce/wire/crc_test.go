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
	t.Logf("256-bit fold: %v; short path: %v; the standard library's 512-bit path from %d bytes: %v", haveFold256, haveShortCRC, stdlib512Min, haveStdlib512)
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
			// The fold itself, where the dispatch would not choose it.
			if haveFold256 && n >= foldBlock {
				if got := updateFold256(crc, p); got != want {
					t.Fatalf("fold: length %d at offset %d from %08x: %08x, want %08x", n, off, crc, got, want)
				}
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
			copies := map[string]func(uint32, []byte, []byte) uint32{"dispatch": copyUpdateIEEE}
			if haveFold256 && n >= foldBlock {
				copies["fold"] = copyFold256 // where the dispatch would not choose it
			}
			for name, copyCRC := range copies {
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

func FuzzCopyUpdateIEEE(f *testing.F) {
	f.Add(uint32(0), make([]byte, 600))
	f.Add(uint32(0xffffffff), make([]byte, 1344))
	f.Fuzz(func(t *testing.T, crc uint32, p []byte) {
		want := crc32.Update(crc, crc32.IEEETable, p)
		d := make([]byte, len(p))
		if got := copyUpdateIEEE(crc, d, p); got != want || !bytes.Equal(d, p) {
			t.Fatalf("length %d from %08x: %08x, want %08x (copied equal: %v)", len(p), crc, got, want, bytes.Equal(d, p))
		}
		if haveFold256 && len(p) >= foldBlock {
			clear(d)
			if got := copyFold256(crc, d, p); got != want || !bytes.Equal(d, p) {
				t.Fatalf("fold: length %d from %08x: %08x, want %08x (copied equal: %v)", len(p), crc, got, want, bytes.Equal(d, p))
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
		if haveFold256 && len(p) >= foldBlock {
			if got := updateFold256(crc, p); got != want {
				t.Fatalf("fold: length %d from %08x: %08x, want %08x", len(p), crc, got, want)
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
// its ICRC computed: as dispatched, by the fold in one pass, or a copy
// and then the CRC.
func BenchmarkCopyAndCRC(b *testing.B) {
	src, dst := make([]byte, 1344), make([]byte, 1344)
	b.Run("dispatch", func(b *testing.B) {
		b.SetBytes(int64(len(src)))
		for b.Loop() {
			copyUpdateIEEE(0, dst, src)
		}
	})
	if haveFold256 {
		b.Run("fold", func(b *testing.B) {
			b.SetBytes(int64(len(src)))
			for b.Loop() {
				copyFold256(0, dst, src)
			}
		})
	}
	b.Run("apart", func(b *testing.B) {
		b.SetBytes(int64(len(src)))
		for b.Loop() {
			copy(dst, src)
			updateIEEE(0, dst)
		}
	})
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
