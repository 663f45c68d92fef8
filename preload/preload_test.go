package preload

import (
	"crypto/sha256"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"vroce.dev/internal/testkit/verbstest"
	_ "vroce.dev/providers/udp"
)

// The tests run this binary as vroce-run and vroced, by the names the
// kit directory gives it, beside an interposer built with cc.
func TestMain(m *testing.M) {
	switch filepath.Base(os.Args[0]) {
	case "vroce-run":
		os.Exit(RunMain(os.Args[1:]))
	case "vroced":
		os.Exit(DaemonMain(os.Args[1:]))
	}
	goleak.VerifyTestMain(m)
}

var (
	kitOnce sync.Once
	kitDir  string
	kitErr  error
)

// kit is a directory holding vroce-run, vroced (links to this binary)
// and libvroce-preload.so, built from preload/c. It needs cc, and the
// programs each test runs; CI has them all.
func kit(t *testing.T, programs ...string) string {
	t.Helper()
	for _, p := range append([]string{"cc"}, programs...) {
		if _, err := exec.LookPath(p); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("CI must run this test, but %s is missing", p)
			}
			t.Skipf("needs %s (CI installs it)", p)
		}
	}
	kitOnce.Do(func() {
		kitDir, kitErr = os.MkdirTemp("", "vroce-preload")
		if kitErr != nil {
			return
		}
		exe, err := os.Executable()
		if err != nil {
			kitErr = err
			return
		}
		for _, name := range []string{"vroce-run", "vroced"} {
			if kitErr = os.Symlink(exe, filepath.Join(kitDir, name)); kitErr != nil {
				return
			}
		}
		out, err := exec.Command("cc", "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror",
			"-o", filepath.Join(kitDir, "libvroce-preload.so"), "c/vroce-preload.c", "-ldl", "-lpthread").CombinedOutput()
		if err != nil {
			kitErr = fmt.Errorf("cc: %v\n%s", err, out)
		}
	})
	require.NoError(t, kitErr)
	return kitDir
}

// vroceRun is vroce-run -- PROGRAM..., in socket mode.
func vroceRun(t *testing.T, dir string, argv ...string) *exec.Cmd {
	return vroceRunMode(t, dir, "socket", argv...)
}

// vroceRunMode is vroce-run --mode MODE -- PROGRAM....
func vroceRunMode(t *testing.T, dir, mode string, argv ...string) *exec.Cmd {
	return vroceRunFlags(t, dir, []string{"--mode", mode}, argv...)
}

// vroceRunFlags is vroceRun with vroce-run's flags.
func vroceRunFlags(t *testing.T, dir string, flags []string, argv ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(dir, "vroce-run"), append(append(slices.Clone(flags), "--"), argv...)...)
	cmd.Env = append(os.Environ(), "VROCE_PROVIDER=udp",
		"VROCE_PRELOAD="+filepath.Join(dir, "libvroce-preload.so"), "VROCED="+filepath.Join(dir, "vroced"))
	return cmd
}

// freePort is a TCP port nothing listens on now.
func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// httpServer runs python3 -m http.server in dir on port, under vroce-run
// or (plain) not, until the test ends; it returns once the port accepts.
func httpServer(t *testing.T, kitDir, root string, port int, plain bool) {
	argv := []string{"python3", "-m", "http.server", strconv.Itoa(port), "--bind", "127.0.0.1", "--directory", root}
	if plain {
		start(t, exec.Command(argv[0], argv[1:]...))
		waitPort(t, port)
		return
	}
	start(t, vroceRun(t, kitDir, argv...))
	waitService(t, port)
}

var reportLine = regexp.MustCompile(`vroce-run: (\d+) connections over vRoCE \((\d+) bytes; (\d+) by RDMA_CM; \d+ reset by the peer\), (\d+) over TCP`)

// counts reads vroce-run's report: connections and bytes over vRoCE,
// connections over TCP.
func counts(t *testing.T, out string) (vroce, bytes, tcp uint64) {
	vroce, bytes, _, tcp = countsCM(t, out)
	return vroce, bytes, tcp
}

// countsCM is counts with the vRoCE connections dialled by RDMA_CM.
func countsCM(t *testing.T, out string) (vroce, bytes, cm, tcp uint64) {
	m := reportLine.FindStringSubmatch(out)
	require.NotNil(t, m, "no report in %q", out)
	u := func(s string) uint64 { v, _ := strconv.ParseUint(s, 10, 64); return v }
	return u(m[1]), u(m[2]), u(m[3]), u(m[4])
}

// modes are the connection modes each client test runs in.
var modes = []string{"socket", "cm"}

// curl, interposed, fetches 64 MiB from python's http.server, interposed:
// the bytes are the file's, and they crossed vRoCE (vroced's counters);
// in CM mode the connection was made by RDMA_CM, with no TCP at all.
func TestCurlFromPythonHTTPServer(t *testing.T) {
	dir := kit(t, "python3", "curl")
	root := t.TempDir()
	want := make([]byte, 64<<20)
	verbstest.Fill(want, 42)
	require.NoError(t, os.WriteFile(filepath.Join(root, "big"), want, 0o644))
	port := freePort(t)
	httpServer(t, dir, root, port, false)

	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			got := filepath.Join(t.TempDir(), "got")
			out, err := vroceRunMode(t, dir, mode, "curl", "-sS", "-o", got, fmt.Sprintf("http://127.0.0.1:%d/big", port)).CombinedOutput()
			require.NoError(t, err, "%s", out)
			body, err := os.ReadFile(got)
			require.NoError(t, err)
			require.Equal(t, sha256.Sum256(want), sha256.Sum256(body), "the file came back different")
			conns, n, cm, _ := countsCM(t, string(out))
			assert.Equal(t, uint64(1), conns, "one connection over vRoCE")
			assert.GreaterOrEqual(t, n, uint64(len(want)), "the file's bytes went over vRoCE")
			if mode == "cm" {
				assert.Equal(t, uint64(1), cm, "made by RDMA_CM")
			} else {
				assert.Zero(t, cm)
			}
		})
	}
}

// A peer that does not speak vRoCE keeps the program's own TCP socket:
// the same fetch from a plain server works, over TCP.
func TestAPlainPeerStaysOnTCP(t *testing.T) {
	dir := kit(t, "python3", "curl")
	root := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(root, "small"), []byte("hello over tcp\n"), 0o644))
	port := freePort(t)
	httpServer(t, dir, root, port, true)
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			out, err := vroceRunMode(t, dir, mode, "curl", "-sS", fmt.Sprintf("http://127.0.0.1:%d/small", port)).CombinedOutput()
			require.NoError(t, err, "%s", out)
			assert.Contains(t, string(out), "hello over tcp")
			conns, _, tcp := counts(t, string(out))
			assert.Zero(t, conns)
			assert.Equal(t, uint64(1), tcp)
		})
	}
}

// A closed port is refused as it would be without vroce-run: the same
// errno, and curl's same exit code.
func TestAClosedPortIsRefused(t *testing.T) {
	dir := kit(t, "python3", "curl")
	port := freePort(t)
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			out, err := vroceRunMode(t, dir, mode, "python3", "-c", fmt.Sprintf("import socket; socket.create_connection(('127.0.0.1', %d))", port)).CombinedOutput()
			require.Error(t, err)
			assert.Contains(t, string(out), "Connection refused")

			plain := exec.Command("curl", "-sS", fmt.Sprintf("http://127.0.0.1:%d/", port)).Run()
			interposed := vroceRunMode(t, dir, mode, "curl", "-sS", fmt.Sprintf("http://127.0.0.1:%d/", port)).Run()
			require.Error(t, plain)
			require.Error(t, interposed)
			assert.Equal(t, plain.(*exec.ExitError).ExitCode(), interposed.(*exec.ExitError).ExitCode())
		})
	}
}

// A program the interposer cannot enter (a static binary) is named as
// such, not reported as having sent nothing.
func TestAStaticProgramIsSaidNotInterposed(t *testing.T) {
	dir := kit(t, "busybox")
	bb, _ := exec.LookPath("busybox")
	if out, _ := exec.Command("ldd", bb).CombinedOutput(); !strings.Contains(string(out), "not a dynamic") {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI installs busybox-static, but %s is dynamic", bb)
		}
		t.Skipf("%s is dynamic here; CI's busybox-static is not", bb)
	}
	out, err := vroceRun(t, dir, bb, "true").CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "was not interposed")
}

// A non-blocking connect reports EINPROGRESS, becomes writable, and
// SO_ERROR then gives the outcome: 0 and a working stream to a vRoCE
// service, ECONNREFUSED from a closed port; asyncio's event loop works
// on top.
func TestNonBlockingConnect(t *testing.T) {
	dir := kit(t, "python3")
	root := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(root, "hello"), []byte("hello, event loop\n"), 0o644))
	port := freePort(t)
	httpServer(t, dir, root, port, false)
	closed := freePort(t)
	script := fmt.Sprintf(`
import asyncio, errno, select, socket
def attempt(port):
    s = socket.socket()
    s.setblocking(False)
    r = s.connect_ex(("127.0.0.1", port))
    select.select([], [s], [], 10)
    return s, errno.errorcode.get(r, r), errno.errorcode.get(s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR), "OK")
s, r, e = attempt(%d)
print("open:", r, e)
s.setblocking(True)
s.sendall(b"GET /hello HTTP/1.0\r\n\r\n")
print("body:", b"hello, event loop" in s.makefile("rb").read())
print("closed:", *attempt(%d)[1:])
async def main():
    reader, writer = await asyncio.open_connection("127.0.0.1", %d)
    writer.write(b"GET /hello HTTP/1.0\r\n\r\n")
    print("asyncio:", b"hello, event loop" in await reader.read())
asyncio.run(main())
`, port, closed, port)
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			out := interposedMode(t, dir, mode, "python3", "-c", script)
			assert.Contains(t, out, "open: EINPROGRESS OK")
			assert.Contains(t, out, "body: True")
			assert.Contains(t, out, "closed: EINPROGRESS ECONNREFUSED")
			assert.Contains(t, out, "asyncio: True")
			conns, _, _ := counts(t, out)
			assert.Equal(t, uint64(2), conns, "both streams over vRoCE")
		})
	}
}

// A rules file decides which connections vroced takes: a skipped port
// stays on TCP even to a vRoCE service, another is taken; a bad file is
// refused before the program starts, naming the line.
func TestRulesFile(t *testing.T) {
	dir := kit(t, "python3", "curl")
	root := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(root, "f"), []byte("ruled\n"), 0o644))
	skipped, taken := freePort(t), freePort(t)
	httpServer(t, dir, root, skipped, false)
	httpServer(t, dir, root, taken, false)
	rules := filepath.Join(t.TempDir(), "rules")
	require.NoError(t, os.WriteFile(rules, []byte(fmt.Sprintf("skip 127.0.0.1:%d # this one stays on TCP\ntake *\n", skipped)), 0o644))
	fetch := func(port int) string {
		cmd := exec.Command(filepath.Join(dir, "vroce-run"), "--rules", rules, "--", "curl", "-sS", fmt.Sprintf("http://127.0.0.1:%d/f", port))
		cmd.Env = vroceRun(t, dir).Env
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		assert.Contains(t, string(out), "ruled")
		return string(out)
	}
	v, _, tcp := counts(t, fetch(skipped))
	assert.Equal(t, [2]uint64{0, 1}, [2]uint64{v, tcp}, "skipped: over TCP")
	v, _, tcp = counts(t, fetch(taken))
	assert.Equal(t, [2]uint64{1, 0}, [2]uint64{v, tcp}, "taken: over vRoCE")

	require.NoError(t, os.WriteFile(rules, []byte("take *\nmaybe :80\n"), 0o644))
	cmd := exec.Command(filepath.Join(dir, "vroce-run"), "--rules", rules, "--", "true")
	cmd.Env = vroceRun(t, dir).Env
	out, err := cmd.CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "line 2")
}
