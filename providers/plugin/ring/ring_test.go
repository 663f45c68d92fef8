//go:build linux

package ring

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		os.Exit(runChild(mode))
	}
	goleak.VerifyTestMain(m)
}

const maxLen = 9000

// pair is both ends of both rings of one region, in one process.
type pair struct {
	reg          *Region
	bells        [4]*Doorbell // ring 0 data, ring 0 room, ring 1 data, ring 1 room
	prod0, prod1 *Producer
	cons0, cons1 *Consumer
}

func newPair(t testing.TB, area int) *pair {
	reg, err := Create(area)
	require.NoError(t, err)
	p := &pair{reg: reg}
	for i := range p.bells {
		p.bells[i], err = NewDoorbell()
		require.NoError(t, err)
	}
	p.prod0 = reg.Producer(0, p.bells[0], p.bells[1], maxLen)
	p.cons0 = reg.Consumer(0, p.bells[0], p.bells[1], maxLen)
	p.prod1 = reg.Producer(1, p.bells[2], p.bells[3], maxLen)
	p.cons1 = reg.Consumer(1, p.bells[2], p.bells[3], maxLen)
	t.Cleanup(func() {
		for _, b := range p.bells {
			b.Close()
		}
		reg.Close()
	})
	return p
}

var peer = netip.MustParseAddrPort("192.0.2.7:4791")

// numbered is datagram i of a run: its number, then a pattern, n bytes.
func numbered(i, n int) []byte {
	b := make([]byte, n)
	for j := range b {
		b[j] = byte(i*7 + j)
	}
	binary.LittleEndian.PutUint32(b, uint32(i))
	return b
}

// get waits for and returns the next datagram.
func get(t testing.TB, c *Consumer, buf []byte) (Meta, []byte) {
	for {
		m, n, ok, err := c.TryGet(buf)
		require.NoError(t, err)
		if ok {
			require.NoError(t, c.Release())
			return m, buf[:n]
		}
		require.NoError(t, c.Wait(0))
	}
}

func TestADatagramCrossesWithItsAddress(t *testing.T) {
	p := newPair(t, MinArea)
	v6 := netip.MustParseAddrPort("[2001:db8::1]:1234")
	require.NoError(t, p.prod0.Put(Meta{Addr: peer, Coalesce: true}, []byte("head"), []byte("body"), []byte("tail")))
	require.NoError(t, p.prod0.Put(Meta{Addr: v6}, []byte("x"), nil, nil))
	buf := make([]byte, maxLen)
	m, d := get(t, p.cons0, buf)
	assert.Equal(t, Meta{Addr: peer, Coalesce: true}, m)
	assert.Equal(t, "headbodytail", string(d))
	m, d = get(t, p.cons0, buf)
	assert.Equal(t, Meta{Addr: v6}, m)
	assert.Equal(t, "x", string(d))
	_, _, ok, err := p.cons0.TryGet(buf)
	require.NoError(t, err)
	assert.False(t, ok, "the ring is empty")
}

// Two goroutines over one mapping, many times round the area, with a
// producer faster than its consumer: every datagram arrives, in order,
// and the producer waits rather than drop.
func TestAFullRingWaitsAndLosesNothing(t *testing.T) {
	p := newPair(t, MinArea)
	const count = 20000
	done := make(chan error, 1)
	go func() {
		for i := range count {
			d := numbered(i, 4+i%1500)
			if err := p.prod0.Put(Meta{Addr: peer}, d[:len(d)/2], d[len(d)/2:], nil); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	buf := make([]byte, maxLen)
	for i := range count {
		_, d := get(t, p.cons0, buf)
		require.Equal(t, numbered(i, 4+i%1500), d, "datagram %d", i)
		if i%1000 == 0 {
			// Fall behind until the producer has had to wait for room.
			require.Eventually(t, func() bool { return p.cons0.q.producerWaits.Load() == 1 }, 5*time.Second, 50*time.Microsecond)
		}
	}
	require.NoError(t, <-done)
	assert.Zero(t, p.cons0.Dropped())
}

// A consumer asleep in Wait is woken by Publish, by Interrupt, and for
// good by Close.
func TestWaitWakes(t *testing.T) {
	p := newPair(t, MinArea)
	woke := make(chan error, 1)
	wait := func() { go func() { woke <- p.cons0.Wait(0) }() }
	sleeping := func() {
		require.Eventually(t, func() bool { return p.cons0.q.consumerSleeps.Load() == 1 }, 5*time.Second, 100*time.Microsecond)
	}

	wait()
	sleeping()
	require.NoError(t, p.prod0.Put(Meta{Addr: peer}, []byte("wake"), nil, nil))
	require.NoError(t, <-woke)
	get(t, p.cons0, make([]byte, maxLen))

	wait()
	sleeping()
	require.NoError(t, p.cons0.Interrupt())
	require.NoError(t, <-woke)

	wait()
	sleeping()
	p.cons0.Close()
	assert.ErrorIs(t, <-woke, net.ErrClosed)
	assert.ErrorIs(t, p.cons0.Wait(0), net.ErrClosed, "and from then on")
}

// A producer waiting for room is woken by Release, and by Close.
func TestAFullProducerWakes(t *testing.T) {
	p := newPair(t, MinArea)
	big := make([]byte, 8000)
	for {
		ok, err := p.prod0.TryPut(Meta{Addr: peer}, big, nil, nil)
		require.NoError(t, err)
		if !ok {
			break
		}
	}
	require.NoError(t, p.prod0.Publish())
	put := make(chan error, 1)
	go func() { put <- p.prod0.Put(Meta{Addr: peer}, big, nil, nil) }()
	require.Eventually(t, func() bool { return p.prod0.q.producerWaits.Load() == 1 }, 5*time.Second, 100*time.Microsecond)
	get(t, p.cons0, make([]byte, maxLen))
	require.NoError(t, <-put)

	for {
		ok, err := p.prod0.TryPut(Meta{Addr: peer}, big, nil, nil)
		require.NoError(t, err)
		if !ok {
			break
		}
	}
	go func() { put <- p.prod0.Put(Meta{Addr: peer}, big, nil, nil) }()
	require.Eventually(t, func() bool { return p.prod0.q.producerWaits.Load() == 1 }, 5*time.Second, 100*time.Microsecond)
	p.prod0.Close()
	assert.ErrorIs(t, <-put, net.ErrClosed)
}

// Indices the other process wrote wrongly poison the ring with
// ErrCorrupt; the same ring written rightly (the positive control) reads.
func TestCorruptIndicesAreRefused(t *testing.T) {
	for _, c := range []struct {
		name string
		head uint64
	}{
		{"HeadBeyondTheArea", MinArea + 8},
		{"HeadOffASlot", 12},
		{"HeadBehindTail", ^uint64(7)},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := newPair(t, MinArea)
			p.reg.ring(0).head.Store(c.head)
			_, _, _, err := p.cons0.TryGet(make([]byte, maxLen))
			assert.ErrorIs(t, err, ErrCorrupt)
			_, _, _, again := p.cons0.TryGet(make([]byte, maxLen))
			assert.ErrorIs(t, again, ErrCorrupt, "the ring stays poisoned")
		})
	}
	t.Run("AConsumerTailAhead", func(t *testing.T) {
		p := newPair(t, MinArea)
		big := make([]byte, 8000)
		for range 9 {
			p.prod0.TryPut(Meta{Addr: peer}, big, nil, nil)
		}
		p.reg.ring(0).tail.Store(1 << 40)
		_, err := p.prod0.TryPut(Meta{Addr: peer}, big, nil, nil)
		assert.ErrorIs(t, err, ErrCorrupt)
	})
	t.Run("Control", func(t *testing.T) {
		p := newPair(t, MinArea)
		require.NoError(t, p.prod0.Put(Meta{Addr: peer}, []byte("ok"), nil, nil))
		_, d := get(t, p.cons0, make([]byte, maxLen))
		assert.Equal(t, "ok", string(d))
	})
}

// A slot header that lies about its length is refused.
func TestASlotThatLiesIsRefused(t *testing.T) {
	p := newPair(t, MinArea)
	require.NoError(t, p.prod0.Put(Meta{Addr: peer}, []byte("ok"), nil, nil))
	binary.LittleEndian.PutUint32(p.reg.ring(0).area[0:], maxLen+1)
	_, _, _, err := p.cons0.TryGet(make([]byte, maxLen))
	assert.ErrorIs(t, err, ErrCorrupt)
}

// Map trusts only a memfd that is sealed, of the size announced, with the
// header Create writes.
func TestMapChecksTheMemfd(t *testing.T) {
	reg, err := Create(MinArea)
	require.NoError(t, err)
	defer reg.Close()
	dup := func() int {
		fd, err := unix.Dup(reg.FD())
		require.NoError(t, err)
		return fd
	}
	m, err := Map(dup(), MinArea)
	require.NoError(t, err, "the control")
	m.Close()

	_, err = Map(dup(), 2*MinArea)
	assert.ErrorIs(t, err, ErrCorrupt, "another size")

	fd, err := unix.MemfdCreate("unsealed", unix.MFD_CLOEXEC)
	require.NoError(t, err)
	require.NoError(t, unix.Ftruncate(fd, int64(RegionSize(MinArea))))
	_, err = Map(fd, MinArea)
	assert.ErrorIs(t, err, ErrCorrupt, "unsealed")
	assert.ErrorContains(t, err, "sealed")

	binary.LittleEndian.PutUint32(reg.mem[4:], ABIVersion+1)
	_, err = Map(dup(), MinArea)
	assert.ErrorIs(t, err, ErrCorrupt, "another ABI")
	assert.ErrorContains(t, err, fmt.Sprintf("ABI %d", ABIVersion+1))
}

func TestRingNoAllocationPerPacket(t *testing.T) {
	p := newPair(t, MinArea)
	d := numbered(1, 1400)
	buf := make([]byte, maxLen)
	allocs := testing.AllocsPerRun(1000, func() {
		for range 16 {
			if _, err := p.prod0.TryPut(Meta{Addr: peer}, d[:40], d[40:], nil); err != nil {
				t.Fatal(err)
			}
		}
		p.prod0.Publish()
		for range 16 {
			if _, _, ok, err := p.cons0.TryGet(buf); !ok || err != nil {
				t.Fatal(ok, err)
			}
		}
		p.cons0.Release()
	})
	assert.Zero(t, allocs)
}

func FuzzDecodeSlot(f *testing.F) {
	area := make([]byte, 256)
	putHeader(area, 5, Meta{Addr: peer})
	f.Add(area[:64], uint64(0), uint64(64))
	wrap := make([]byte, 64)
	binary.LittleEndian.PutUint32(wrap[56:], wrapMark)
	f.Add(wrap, uint64(56), uint64(16))
	f.Add([]byte{0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0}, uint64(0), uint64(8))
	f.Fuzz(func(t *testing.T, area []byte, off, avail uint64) {
		_, start, n, advance, err := decodeSlot(area, off, avail, maxLen)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if advance == 0 || advance > avail || off+advance > uint64(len(area)) {
			t.Fatalf("advance %d (off %d avail %d area %d)", advance, off, avail, len(area))
		}
		if n >= 0 && (start < 0 || start+n > len(area) || n > maxLen) {
			t.Fatalf("datagram [%d,+%d) outside a %d-byte area", start, n, len(area))
		}
	})
}

// Across two processes: the child (this test binary again) maps the
// region and echoes every datagram back on the other ring.
func TestAcrossTwoProcesses(t *testing.T) {
	p := newPair(t, MinArea)
	child := startChild(t, "echo", p)
	const count = 5000
	errs := make(chan error, 1)
	go func() {
		for i := range count {
			if err := p.prod0.Put(Meta{Addr: peer}, numbered(i, 4+i%1400), nil, nil); err != nil {
				errs <- err
				return
			}
		}
		errs <- nil
	}()
	buf := make([]byte, maxLen)
	for i := range count {
		m, d := get(t, p.cons1, buf)
		require.Equal(t, peer, m.Addr)
		require.True(t, bytes.Equal(numbered(i, 4+i%1400), d), "datagram %d", i)
	}
	require.NoError(t, <-errs)
	require.NoError(t, p.prod0.Put(Meta{}, nil, nil, nil)) // the end
	require.NoError(t, child.Wait())
}

const childEnv = "VROCE_RING_TEST_CHILD"

// childBusy is how long the child polls before it sleeps:
// $VROCE_BUSY_POLL, as a provider's pump would.
func childBusy() time.Duration {
	d, _ := time.ParseDuration(os.Getenv("VROCE_BUSY_POLL"))
	return d
}

// startChild runs this test binary as the other process, handing it the
// memfd and the four doorbells as fds 3 to 7.
func startChild(t testing.TB, mode string, p *pair) *exec.Cmd {
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), childEnv+"="+mode, fmt.Sprintf("VROCE_RING_TEST_AREA=%d", p.reg.Area()))
	cmd.Stderr = os.Stderr
	for _, fd := range []int{p.reg.FD(), p.bells[0].FD(), p.bells[1].FD(), p.bells[2].FD(), p.bells[3].FD()} {
		dup, err := unix.Dup(fd)
		require.NoError(t, err)
		f := os.NewFile(uintptr(dup), "shared")
		defer f.Close()
		cmd.ExtraFiles = append(cmd.ExtraFiles, f)
	}
	require.NoError(t, cmd.Start())
	return cmd
}

// runChild is the other process: "echo" sends every datagram back until
// an empty one; "sink" counts datagrams until an empty one and sends the
// count back.
func runChild(mode string) int {
	var area int
	fmt.Sscan(os.Getenv("VROCE_RING_TEST_AREA"), &area)
	reg, err := Map(3, area)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var bells [4]*Doorbell
	for i := range bells {
		if bells[i], err = DoorbellFromFD(4 + i); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	in := reg.Consumer(0, bells[0], bells[1], maxLen)
	out := reg.Producer(1, bells[2], bells[3], maxLen)
	buf := make([]byte, maxLen)
	count := 0
	for {
		m, n, ok, err := in.TryGet(buf)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if !ok {
			in.Release()
			if err := out.Publish(); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			if err := in.Wait(childBusy()); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			continue
		}
		if n == 0 {
			in.Release()
			if mode == "sink" {
				var c [8]byte
				binary.LittleEndian.PutUint64(c[:], uint64(count))
				out.Put(m, c[:], nil, nil)
			}
			return 0
		}
		count++
		if mode == "echo" {
			for {
				ok, err := out.TryPut(m, buf[:n], nil, nil)
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
					return 1
				}
				if ok {
					break
				}
				in.Release()
				if err := out.WaitRoom(); err != nil {
					fmt.Fprintln(os.Stderr, err)
					return 1
				}
			}
		}
		if count%32 == 0 {
			in.Release()
		}
	}
}

// The ring alone between two processes: 1,400-byte datagrams to a child
// that counts them. Reported as packets a second.
func BenchmarkAcrossTwoProcesses1400(b *testing.B) {
	p := newPair(b, 1<<20)
	child := startChild(b, "sink", p)
	d := numbered(1, 1400)
	b.SetBytes(1400)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for {
			ok, err := p.prod0.TryPut(Meta{Addr: peer}, d, nil, nil)
			if err != nil {
				b.Fatal(err)
			}
			if ok {
				break
			}
			if err := p.prod0.WaitRoom(); err != nil {
				b.Fatal(err)
			}
		}
		if i%32 == 31 {
			p.prod0.Publish()
		}
	}
	require.NoError(b, p.prod0.Put(Meta{Addr: peer}, nil, nil, nil))
	_, got := get(b, p.cons1, make([]byte, maxLen))
	b.StopTimer()
	require.Equal(b, uint64(b.N), binary.LittleEndian.Uint64(got))
	require.NoError(b, child.Wait())
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pkts/s")
}

// A 64-byte ping-pong with the child, neither side polling unless
// $VROCE_BUSY_POLL says so: two doorbell wake-ups across processes a
// round, the cost a plugin adds to each packet's way in and out.
func BenchmarkPingPongAcrossTwoProcesses(b *testing.B) {
	p := newPair(b, MinArea)
	child := startChild(b, "echo", p)
	d := numbered(1, 64)
	buf := make([]byte, maxLen)
	b.ResetTimer()
	for range b.N {
		require.NoError(b, p.prod0.Put(Meta{Addr: peer}, d, nil, nil))
		for {
			_, _, ok, err := p.cons1.TryGet(buf)
			require.NoError(b, err)
			if ok {
				break
			}
			require.NoError(b, p.cons1.Wait(childBusy()))
		}
		require.NoError(b, p.cons1.Release())
	}
	b.StopTimer()
	require.NoError(b, p.prod0.Put(Meta{}, nil, nil, nil))
	require.NoError(b, child.Wait())
}
