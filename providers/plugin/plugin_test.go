//go:build linux

package plugin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"vroce.dev/internal/testkit/providertest"
	"vroce.dev/internal/testkit/verbstest"
	"vroce.dev/providers/plugin/ring"
	"vroce.dev/providers/sim"
	_ "vroce.dev/providers/udp"
	"vroce.dev/vroce"
)

// The tests run this test binary as the plugin, under the names the
// plugins directory (pluginDir) gives it: its name says what to serve.
func TestMain(m *testing.M) {
	if name, ok := strings.CutPrefix(filepath.Base(os.Args[0]), binaryPrefix); ok {
		servePlugin(name)
		return
	}
	if os.Getenv(appEnv) != "" {
		os.Exit(runApp(os.Args[1:]))
	}
	code := m.Run()
	Cleanup()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// servePlugin is the test binary as vroce-provider-NAME.
func servePlugin(name string) {
	switch name {
	case "udp":
		Main(Description{Name: "udp"})
	case "afxdp":
		Main(Description{Name: "afxdp"})
	case "simnet":
		registerSimnet()
		Main(Description{Name: "simnet"})
	case "v99":
		serve(describe(Description{Name: "udp"}), 99)
	case "chatty":
		fmt.Println("starting up!")
		Main(Description{Name: "udp"})
	}
	os.Exit(2)
}

// registerSimnet makes "simnet": devices on one simulated network per
// plugin process, its faults set by the first device's options.
func registerSimnet() {
	var (
		once sync.Once
		n    *sim.Network
	)
	vroce.RegisterProvider("simnet", func(cfg vroce.ProviderConfig) (vroce.Provider, error) {
		c, err := vroce.OptionsAs[sim.Config]("simnet", cfg.Options)
		if err != nil {
			return nil, err
		}
		once.Do(func() { n = sim.NewNetwork(c) })
		addr, err := netip.ParseAddrPort(cfg.Addr)
		if err != nil {
			return nil, err
		}
		return n.Attach(addr)
	})
}

var (
	dirOnce sync.Once
	dir     string
)

// pluginDir is a directory of vroce-provider-* links to this test binary.
func pluginDir(t testing.TB) string {
	dirOnce.Do(func() {
		exe, err := os.Executable()
		require.NoError(t, err)
		d, err := os.MkdirTemp("", "vroce-plugins")
		require.NoError(t, err)
		for _, name := range []string{"udp", "simnet", "v99", "chatty"} {
			require.NoError(t, os.Symlink(exe, filepath.Join(d, binaryPrefix+name)))
		}
		dir = d
	})
	return dir
}

func provider(t testing.TB, name string) string {
	return "plugin:" + filepath.Join(pluginDir(t), binaryPrefix+name)
}

// pidOf is the plugin process serving a device.
func pidOf(p vroce.Provider) int { return p.(*device).p.pid }

func openUDP(t *testing.T) vroce.Provider {
	p, err := vroce.OpenProvider(provider(t, "udp"), vroce.ProviderConfig{Addr: "127.0.0.1:0"})
	require.NoError(t, err)
	return p
}

// openOn opens a device on p, closed (with p) at the end of the test.
func openOn(t *testing.T, p vroce.Provider) *vroce.Device {
	d, err := vroce.OpenWithProvider(p, vroce.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { d.Close() })
	return d
}

// Every provider's contract, kept across the process boundary. The fault
// is the plugin's death.
func TestConformance(t *testing.T) {
	providertest.Run(t, func(t *testing.T) (vroce.Provider, vroce.Provider) {
		return openUDP(t), openUDP(t)
	}, func(t *testing.T, p vroce.Provider) {
		require.NoError(t, syscall.Kill(pidOf(p), syscall.SIGKILL))
	})
}

// A verified WRITE, READ, SEND and atomic between two devices over
// plugin:udp.
func TestVerbsOverPluginUDP(t *testing.T) {
	da := verbstest.OpenDevice(t, vroce.Config{Provider: provider(t, "udp"), Addr: "127.0.0.1:0"})
	db := verbstest.OpenDevice(t, vroce.Config{Provider: provider(t, "udp"), Addr: "127.0.0.1:0"})
	a, b := verbstest.Pair(t, da, db, verbstest.DefaultOpts())
	verbstest.Exercise(t, a, b, 256<<10)
	verbstest.PingPong(t, a, b, 200, 64)
}

// Loss, reordering and duplicates happen inside the plugin (simulated
// devices), and the transport recovers across the boundary.
func TestLossAcrossThePlugin(t *testing.T) {
	faults := sim.Config{Seed: 7, Loss: 0.02, Reorder: 0.02, Duplicate: 0.01}
	open := func(addr string) *vroce.Device {
		return verbstest.OpenDevice(t, vroce.Config{Provider: provider(t, "simnet"), Addr: addr, ProviderOptions: faults})
	}
	a, b := verbstest.Pair(t, open("127.0.0.1:4791"), open("127.0.0.2:4791"), verbstest.DefaultOpts())
	verbstest.Exercise(t, a, b, 512<<10)
	retransmitted := a.QP.Stats().Retransmits + b.QP.Stats().Retransmits
	assert.NotZero(t, retransmitted, "the simulated losses happened")
}

// kill -9 of the plugin fails every device it served, the program goes
// on, and the next Open starts a fresh plugin.
func TestKilledPluginFailsItsDevices(t *testing.T) {
	pa, pb := openUDP(t), openUDP(t)
	da, db := openOn(t, pa), openOn(t, pb)
	a, b := verbstest.Pair(t, da, db, verbstest.DefaultOpts())
	verbstest.Exercise(t, a, b, 4096)
	pid := pidOf(pa)

	killed := time.Now()
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	for _, d := range []*vroce.Device{da, db} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		ev, err := d.AsyncEvent(ctx)
		cancel()
		require.NoError(t, err, "no EventDeviceFatal")
		require.Equal(t, vroce.EventDeviceFatal, ev.Type)
		assert.ErrorIs(t, ev.Err, vroce.ErrProviderFailed)
	}
	t.Logf("both devices failed %v after kill -9", time.Since(killed))
	verbstest.WaitFor(t, "the QPs flushed to ERR", func() bool {
		return a.QP.State() == vroce.QPSErr && b.QP.State() == vroce.QPSErr
	})

	pc := openUDP(t)
	assert.NotEqual(t, pid, pidOf(pc), "a fresh plugin")
	dc, dd := openOn(t, pc), openOn(t, openUDP(t))
	c, d := verbstest.Pair(t, dc, dd, verbstest.DefaultOpts())
	verbstest.Exercise(t, c, d, 4096)
}

func TestRefusals(t *testing.T) {
	t.Run("AnotherProtocolVersion", func(t *testing.T) {
		_, err := vroce.OpenProvider(provider(t, "v99"), vroce.ProviderConfig{Addr: "127.0.0.1:0"})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "99")
		assert.Contains(t, err.Error(), fmt.Sprintf("version %d", ProtocolVersion))
	})
	t.Run("StdoutBeforeServing", func(t *testing.T) {
		_, err := vroce.OpenProvider(provider(t, "chatty"), vroce.ProviderConfig{Addr: "127.0.0.1:0"})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "printed to stdout before it served")
		assert.Contains(t, err.Error(), "starting up!")
	})
	t.Run("AMissingBinaryNamesThePathsTried", func(t *testing.T) {
		t.Setenv("VROCE_PLUGIN_DIR", pluginDir(t)+":/nonexistent")
		_, err := vroce.OpenProvider("plugin:nosuch", vroce.ProviderConfig{})
		require.Error(t, err)
		assert.Contains(t, err.Error(), filepath.Join(pluginDir(t), "vroce-provider-nosuch"))
		assert.Contains(t, err.Error(), "/nonexistent/vroce-provider-nosuch")
		assert.Contains(t, err.Error(), "never $PATH")
	})
	t.Run("ANameResolvesInThePluginDir", func(t *testing.T) {
		t.Setenv("VROCE_PLUGIN_DIR", "/nonexistent:"+pluginDir(t))
		p, err := vroce.OpenProvider("plugin:udp", vroce.ProviderConfig{Addr: "127.0.0.1:0"})
		require.NoError(t, err)
		p.Close()
	})
	t.Run("AChecksumMismatch", func(t *testing.T) {
		_, err := vroce.OpenProvider(provider(t, "udp"), vroce.ProviderConfig{Addr: "127.0.0.1:0",
			Options: Options{Checksum: strings.Repeat("00", 32)}})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "SHA-256")
		assert.Contains(t, err.Error(), pluginDir(t))
	})
	t.Run("TheRightChecksum", func(t *testing.T) {
		exe, err := os.Executable()
		require.NoError(t, err)
		f, err := os.Open(exe)
		require.NoError(t, err)
		h := sha256.New()
		_, err = io.Copy(h, f)
		f.Close()
		require.NoError(t, err)
		p, err := vroce.OpenProvider(provider(t, "udp"), vroce.ProviderConfig{Addr: "127.0.0.1:0",
			Options: Options{Checksum: hex.EncodeToString(h.Sum(nil))}})
		require.NoError(t, err)
		p.Close()
	})
	t.Run("RunByHand", func(t *testing.T) {
		out, err := exec.Command(filepath.Join(pluginDir(t), binaryPrefix+"udp")).CombinedOutput()
		require.Error(t, err)
		assert.Contains(t, string(out), "plugin")
	})
}

// describe prints what the binary is, as JSON.
func TestDescribe(t *testing.T) {
	out, err := exec.Command(filepath.Join(pluginDir(t), binaryPrefix+"udp"), "describe").Output()
	require.NoError(t, err)
	var d Description
	require.NoError(t, json.Unmarshal(out, &d))
	assert.Equal(t, "udp", d.Name)
	assert.Equal(t, []int{ProtocolVersion}, d.Protocols)
	assert.Equal(t, ring.ABIVersion, d.RingABI)
	assert.True(t, d.ProbesFromASocket)
	assert.True(t, d.DeviceAddr)
}

// Opening a device on a running plugin: one control call and the rings.
func BenchmarkOpenDevice(b *testing.B) {
	p, err := vroce.OpenProvider(provider(b, "udp"), vroce.ProviderConfig{Addr: "127.0.0.1:0"})
	require.NoError(b, err)
	defer p.Close()
	b.ResetTimer()
	for range b.N {
		q, err := vroce.OpenProvider(provider(b, "udp"), vroce.ProviderConfig{Addr: "127.0.0.1:0"})
		require.NoError(b, err)
		q.Close()
	}
}

// Launching a plugin and opening its first device (ns/op, and the
// median, which issue 22's target is of), then the memory the plugin
// holds with that device open and idle (VmRSS, which counts the ring
// pages it has touched). Each launch starts from no plugin running; the
// last one's exit is not timed.
func BenchmarkLaunchAndOpen(b *testing.B) {
	Cleanup()
	var rss float64
	took := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		p, err := vroce.OpenProvider(provider(b, "udp"), vroce.ProviderConfig{Addr: "127.0.0.1:0"})
		require.NoError(b, err)
		b.StopTimer()
		took = append(took, time.Since(start))
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pidOf(p)))
		require.NoError(b, err)
		for _, line := range strings.Split(string(status), "\n") {
			var kb float64
			if _, err := fmt.Sscanf(line, "VmRSS: %f kB", &kb); err == nil {
				rss += kb / 1024
			}
		}
		p.Close()
		Cleanup()
		b.StartTimer()
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2])/1e6, "p50-ms")
	b.ReportMetric(rss/float64(b.N), "plugin-RSS-MiB")
}
