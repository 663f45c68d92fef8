package wire

import (
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

// updateIEEE agrees with the standard library for every length up to
// and around the fold's block and threshold (so the short path too), at
// every alignment, from any CRC.
func TestUpdateIEEEMatchesStandardLibrary(t *testing.T) {
	t.Logf("256-bit fold in use: %v; short path: %v", haveFold256, haveShortCRC)
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
			if got, want := updateIEEE(crc, p), crc32.Update(crc, crc32.IEEETable, p); got != want {
				t.Fatalf("length %d at offset %d from %08x: %08x, want %08x", n, off, crc, got, want)
			}
		}
	}
}

func FuzzUpdateIEEE(f *testing.F) {
	f.Add(uint32(0), make([]byte, 600))
	f.Add(uint32(0xffffffff), make([]byte, 4096))
	f.Fuzz(func(t *testing.T, crc uint32, p []byte) {
		if got, want := updateIEEE(crc, p), crc32.Update(crc, crc32.IEEETable, p); got != want {
			t.Fatalf("length %d from %08x: %08x, want %08x", len(p), crc, got, want)
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
