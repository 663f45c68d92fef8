package plugin

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"vroce.dev/internal/testkit/streamtest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vroce.dev/internal/testkit/netnstest"
	"vroce.dev/providers/afxdp"
	"vroce.dev/rsock"
)

// afxdpCaps are the file capabilities vroce-provider-afxdp is given: the
// three AF_XDP needs, and CAP_IPC_LOCK to pin its UMEM past an
// unprivileged user's RLIMIT_MEMLOCK.
const afxdpCaps = "cap_net_admin,cap_net_raw,cap_bpf,cap_ipc_lock+ep"

// An unprivileged program runs rsock over AF_XDP between two namespaces:
// the privilege is the plugin binary's (file capabilities), not the
// program's. The control: the same program asking for afxdp in process
// is refused.
func TestUnprivilegedProgramOverPluginAFXDP(t *testing.T) {
	netnstest.NeedRoot(t, "ip", "ethtool", "setcap", "setpriv")
	ha, hb := netnstest.Link(t, netnstest.LinkOpts{})

	dir, err := os.MkdirTemp("", "vroce-priv")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	exe, err := os.Executable()
	require.NoError(t, err)
	app := filepath.Join(dir, "app")
	copyFile(t, exe, app)
	copyFile(t, exe, filepath.Join(dir, binaryPrefix+"afxdp"))
	netnstest.Sh(t, "", "setcap", afxdpCaps, filepath.Join(dir, binaryPrefix+"afxdp"))

	asNobody := func(ns string, args ...string) *exec.Cmd {
		cmd := exec.Command("ip", append([]string{"netns", "exec", ns, "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", app}, args...)...)
		cmd.Env = append(os.Environ(), appEnv+"=1")
		return cmd
	}
	addr := fmt.Sprintf("%s:7100", ha.IP)

	t.Run("Control", func(t *testing.T) {
		out, err := asNobody(ha.NS, "serve", addr, ha.Dev, "afxdp").CombinedOutput()
		require.Error(t, err, "afxdp in process as nobody: %s", out)
		assert.Contains(t, string(out), "CAP_")
	})

	server := asNobody(ha.NS, "serve", addr, ha.Dev, "plugin:afxdp")
	server.Stderr = os.Stderr
	stdout, err := server.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, server.Start())
	t.Cleanup(func() { server.Process.Kill(); server.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err, "the server never said it listens")
	require.Equal(t, "listening\n", line)

	out, err := asNobody(hb.NS, "dial", addr, hb.Dev, "plugin:afxdp").CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "echoed 1048576 bytes over vroce")
	require.NoError(t, server.Wait())
}

func copyFile(t *testing.T, from, to string) {
	in, err := os.Open(from)
	require.NoError(t, err)
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	require.NoError(t, err)
	_, err = io.Copy(out, in)
	require.NoError(t, err)
	require.NoError(t, out.Close())
}

// appEnv makes the test binary the unprivileged program.
const appEnv = "VROCE_PLUGIN_TEST_APP"

// runApp is the program: "serve ADDR IFACE PROVIDER" echoes one stream,
// "dial ADDR IFACE PROVIDER" sends 1 MiB through it and checks the echo.
func runApp(args []string) int {
	if len(args) != 4 {
		fmt.Fprintln(os.Stderr, "app: want serve|dial ADDR IFACE PROVIDER")
		return 2
	}
	err := func() error {
		verb, addr, iface, prov := args[0], args[1], args[2], args[3]
		defer Cleanup()
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			rsock.Drain(ctx)
		}()
		opts := afxdp.Options{Iface: iface}
		if verb == "serve" {
			lc := rsock.ListenConfig{Provider: prov, ProviderOptions: opts}
			ln, err := lc.Listen(context.Background(), "tcp", addr)
			if err != nil {
				return err
			}
			defer ln.Close()
			fmt.Println("listening")
			return streamtest.ServeEcho(ln)
		}
		d := rsock.Dialer{Provider: prov, ProviderOptions: opts, NoFallback: true, Timeout: 20 * time.Second}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			return err
		}
		defer c.Close()
		if err := streamtest.Echoed(c, 1<<20); err != nil {
			return err
		}
		fmt.Printf("echoed %d bytes over %s\n", 1<<20, c.(interface{ Transport() string }).Transport())
		return nil
	}()
	if err != nil {
		fmt.Fprintln(os.Stderr, "app:", strings.TrimSpace(err.Error()))
		return 1
	}
	return 0
}
