package preload

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"vroce.dev/internal/testkit/streamtest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vroce.dev/internal/testkit/verbstest"
)

// background runs argv under vroce-run until the test ends (SIGTERM,
// then its wait), its output kept and shown on failure.
func background(t *testing.T, dir string, argv ...string) *exec.Cmd {
	return start(t, vroceRun(t, dir, argv...))
}

// start starts cmd until the test ends (SIGTERM, then its wait), its
// output kept and shown on failure.
func start(t *testing.T, cmd *exec.Cmd) *exec.Cmd {
	var log streamtest.SyncBuffer
	cmd.Stdout, cmd.Stderr = &log, &log
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		if t.Failed() {
			t.Logf("%s:\n%s", cmd.Path, log.String())
		}
	})
	return cmd
}

// waitPort waits until a TCP socket listens on port, without connecting
// to it (a one-off server would take the probe for its client).
func waitPort(t *testing.T, port int) {
	verbstest.WaitFor(t, fmt.Sprintf("port %d listens", port), func() bool { return bound(port, "tcp", "0A") })
}

// waitService is waitPort for a port vroced serves: the moment the TCP
// port listens, the vRoCE device must be on its UDP twin already, or a
// client that connects at once is told there is no vRoCE service.
func waitService(t *testing.T, port int) {
	waitPort(t, port)
	assert.True(t, bound(port, "udp", "07"), "port %d listened before its vRoCE device was open", port)
}

// bound says whether /proc/net's proto tables have a socket in state
// (hex: 0A is TCP's LISTEN, 07 an unconnected UDP socket) on port.
func bound(port int, proto, state string) bool {
	// local_address is HEXIP:HEXPORT.
	re := regexp.MustCompile(fmt.Sprintf(`(?m)^\s*\d+: [0-9A-F]+:%04X [0-9A-F]+:[0-9A-F]{4} %s `, port, state))
	for _, f := range []string{"/proc/net/" + proto, "/proc/net/" + proto + "6"} {
		if tab, err := os.ReadFile(f); err == nil && re.Match(tab) {
			return true
		}
	}
	return false
}

// interposed runs argv under vroce-run and returns its output, failing
// the test if it fails.
func interposed(t *testing.T, dir string, argv ...string) string {
	return interposedMode(t, dir, "socket", argv...)
}

// interposedMode is interposed in connection mode mode.
func interposedMode(t *testing.T, dir, mode string, argv ...string) string {
	out, err := vroceRunMode(t, dir, mode, argv...).CombinedOutput()
	require.NoError(t, err, "%s: %s", strings.Join(argv, " "), out)
	return string(out)
}

// overVRoCE checks vroce-run's report: at least conns connections over
// vRoCE carrying bytes, none over TCP.
func overVRoCE(t *testing.T, out string, conns uint64) {
	t.Helper()
	v, n, tcp := counts(t, out)
	assert.GreaterOrEqual(t, v, conns, "connections over vRoCE in %q", out)
	assert.NotZero(t, n, "bytes over vRoCE in %q", out)
	assert.Zero(t, tcp, "connections over TCP in %q", out)
}

// iperf3 both ends interposed: one stream, four, reversed, each over
// vRoCE, the server listening anew between tests; then a daemonized
// server (-D) that outlives its vroce-run.
func TestIperf3(t *testing.T) {
	dir := kit(t, "iperf3")
	port := freePort(t)
	background(t, dir, "iperf3", "-s", "-p", strconv.Itoa(port))
	waitService(t, port)
	for _, mode := range modes {
		for _, args := range [][]string{{}, {"-P", "4"}, {"-R"}} {
			argv := append([]string{"iperf3", "-c", "127.0.0.1", "-p", strconv.Itoa(port), "-t", "1"}, args...)
			out := interposedMode(t, dir, mode, argv...)
			assert.Contains(t, out, "receiver", "iperf3 %v finished", args)
			want := uint64(2) // control and data
			if len(args) > 0 && args[0] == "-P" {
				want = 5
			}
			overVRoCE(t, out, want)
		}
	}

	dport := freePort(t)
	interposed(t, dir, "iperf3", "-s", "-D", "-1", "-p", strconv.Itoa(dport))
	waitService(t, dport) // the daemon, its vroce-run gone
	out := interposed(t, dir, "iperf3", "-c", "127.0.0.1", "-p", strconv.Itoa(dport), "-t", "1")
	overVRoCE(t, out, 2)
}

// redis: the benchmark with 32 clients, pipelined; BGSAVE forks while it
// runs; a 1 MiB value comes back byte for byte.
func TestRedis(t *testing.T) {
	dir := kit(t, "redis-server", "redis-benchmark", "redis-cli")
	port := strconv.Itoa(freePort(t))
	data := t.TempDir()
	background(t, dir, "redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "", "--dir", data)
	p, _ := strconv.Atoi(port)
	waitService(t, p)

	bench := vroceRun(t, dir, "redis-benchmark", "-p", port, "-t", "set,get", "-c", "32", "-P", "8", "-n", "50000", "-q")
	var out bytes.Buffer
	bench.Stdout, bench.Stderr = &out, &out
	require.NoError(t, bench.Start())
	assert.Contains(t, interposed(t, dir, "redis-cli", "-p", port, "BGSAVE"), "Background saving started")
	require.NoError(t, bench.Wait(), "%s", out.String())
	for _, op := range []string{"SET", "GET"} {
		assert.Regexp(t, regexp.MustCompile(op+`: [0-9.]+ requests per second`), out.String())
	}
	overVRoCE(t, out.String(), 32)
	verbstest.WaitFor(t, "the BGSAVE child wrote its dump", func() bool {
		_, err := os.Stat(filepath.Join(data, "dump.rdb"))
		return err == nil
	})
	cm := interposedMode(t, dir, "cm", "redis-benchmark", "-p", port, "-t", "set,get", "-c", "32", "-P", "8", "-n", "20000", "-q")
	assert.Regexp(t, `GET: [0-9.]+ requests per second`, cm)
	overVRoCE(t, cm, 32)

	value := make([]byte, 1<<20)
	verbstest.Fill(value, 9)
	for i := range value {
		value[i] = 'a' + value[i]%26 // printable: redis-cli --raw prints it as it is
	}
	set := vroceRun(t, dir, "redis-cli", "-p", port, "-x", "SET", "big")
	set.Stdin = bytes.NewReader(value)
	o, err := set.CombinedOutput()
	require.NoError(t, err, "%s", o)
	get := vroceRun(t, dir, "redis-cli", "-p", port, "--raw", "GET", "big")
	got, err := get.Output()
	require.NoError(t, err)
	require.True(t, bytes.HasPrefix(got, value) && len(bytes.TrimRight(got[len(value):], "\n")) == 0, "the 1 MiB value came back different (%d bytes)", len(got))
}

// nginx, a master and two workers on epoll with sendfile, serving a file
// and proxying to an upstream it also serves, all interposed: wrk with
// 100 connections, then a reload, then wrk through the proxy.
func TestNginx(t *testing.T) {
	dir := kit(t, "nginx", "wrk", "curl")
	root := t.TempDir()
	file := make([]byte, 64<<10)
	verbstest.Fill(file, 3)
	require.NoError(t, os.WriteFile(filepath.Join(root, "64k"), file, 0o644))
	front, up := freePort(t), freePort(t)
	user := ""
	if os.Geteuid() == 0 {
		user = "user root;" // workers of root's own uid: vroced serves its own user only
	}
	conf := fmt.Sprintf(`%s
worker_processes 2;
pid %[2]s/nginx.pid;
error_log %[2]s/error.log warn;
events { use epoll; worker_connections 1024; }
http {
  access_log off;
  sendfile on;
  client_body_temp_path %[2]s; proxy_temp_path %[2]s; fastcgi_temp_path %[2]s; uwsgi_temp_path %[2]s; scgi_temp_path %[2]s;
  server { listen 127.0.0.1:%[3]d; root %[2]s; location /up/ { proxy_pass http://127.0.0.1:%[4]d/; } }
  server { listen 127.0.0.1:%[4]d; root %[2]s; }
}
`, user, root, front, up)
	confPath := filepath.Join(root, "nginx.conf")
	require.NoError(t, os.WriteFile(confPath, []byte(conf), 0o644))
	interposed(t, dir, "nginx", "-c", confPath)
	t.Cleanup(func() {
		exec.Command("nginx", "-c", confPath, "-s", "stop").Run()
		if t.Failed() {
			log, _ := os.ReadFile(filepath.Join(root, "error.log"))
			t.Logf("nginx error log:\n%s", log)
		}
	})
	waitService(t, front)

	fetch := func(path string) {
		got := filepath.Join(t.TempDir(), "got")
		out := interposed(t, dir, "curl", "-sS", "-o", got, fmt.Sprintf("http://127.0.0.1:%d%s", front, path))
		body, err := os.ReadFile(got)
		require.NoError(t, err)
		require.True(t, bytes.Equal(file, body), "%s came back different", path)
		overVRoCE(t, out, 1)
	}
	// wrk's clients may not fall back: a probe answered later than a
	// falling-back dial waits (200 ms; a machine loaded by other tests,
	// a listener swamped by 100 dials at once) would put a connection on
	// TCP by design, and the test is that every one is vRoCE.
	wrk := func(mode, path string, args ...string) {
		argv := append([]string{"wrk", "-c", "100", "-t", "2", "-d", "2s"}, args...)
		cmd := vroceRunFlags(t, dir, []string{"--mode", mode, "--no-fallback"}, append(argv, fmt.Sprintf("http://127.0.0.1:%d%s", front, path))...)
		b, err := cmd.CombinedOutput()
		require.NoError(t, err, "wrk %s %v: %s", mode, args, b)
		out := fmt.Sprintf("mode %s, %s %v: %s", mode, path, args, b)
		assert.Regexp(t, `Requests/sec:\s+[1-9]`, out)
		assert.NotContains(t, out, "Non-2xx")
		assert.NotContains(t, out, "Socket errors")
		overVRoCE(t, out, 100)
	}
	fetch("/64k")
	for _, mode := range modes {
		wrk(mode, "/64k")
		wrk(mode, "/64k", "-H", "Connection: close") // a connection a request
	}
	// After the reload, once the old workers are gone: a worker shutting
	// down closes each keep-alive connection after its request, which
	// wrk counts as a read error (as it would without vroce-run).
	old := nginxWorkers(t, filepath.Join(root, "nginx.pid"))
	interposed(t, dir, "nginx", "-c", confPath, "-s", "reload")
	verbstest.WaitFor(t, "nginx's workers replaced after the reload", func() bool {
		now := nginxWorkers(t, filepath.Join(root, "nginx.pid"))
		for _, pid := range old {
			if slices.Contains(now, pid) {
				return false
			}
		}
		return len(now) == 2
	})
	fetch("/up/64k")
	wrk("socket", "/up/64k")
}

// nginxWorkers are the live children of the nginx master whose pid
// file is pidFile.
func nginxWorkers(t *testing.T, pidFile string) []int {
	t.Helper()
	b, err := os.ReadFile(pidFile)
	require.NoError(t, err)
	master, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	children, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", master, master))
	require.NoError(t, err)
	var pids []int
	for _, f := range strings.Fields(string(children)) {
		pid, err := strconv.Atoi(f)
		require.NoError(t, err)
		pids = append(pids, pid)
	}
	return pids
}

// TCP_INFO on a stream answers from the stream's own transport, and
// SO_LINGER 0 makes the program's close a reset the peer sees as one.
func TestSocketOptions(t *testing.T) {
	dir := kit(t, "python3")
	port := freePort(t)
	server := fmt.Sprintf(`
import socket
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("127.0.0.1", %d))
l.listen()
print("listening", flush=True)
for _ in range(2):
    c, _ = l.accept()
    try:
        while c.recv(65536):
            c.sendall(b"x")
        print("eof", flush=True)
    except ConnectionResetError:
        print("reset", flush=True)
    c.close()
`, port)
	srv := vroceRun(t, dir, "python3", "-c", server)
	var out streamtest.SyncBuffer
	srv.Stdout, srv.Stderr = &out, &out
	require.NoError(t, srv.Start())
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	waitService(t, port)

	client := fmt.Sprintf(`
import socket, struct
def conn():
    s = socket.create_connection(("127.0.0.1", %d))
    for _ in range(50):
        s.sendall(b"ping" * 100)
        s.recv(1)
    return s
s = conn()
info = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
state, rtt, mss = info[0], struct.unpack_from("I", info, 68)[0], struct.unpack_from("I", info, 20)[0]
print("state", state, "rtt>0", rtt > 0, "mss>0", mss > 0, flush=True)
s.close()
s = conn()
s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
s.close()
`, port)
	res := interposed(t, dir, "python3", "-c", client)
	assert.Contains(t, res, "state 1 rtt>0 True mss>0 True", "TCP_INFO: ESTABLISHED, the stream's RTT and MSS")
	overVRoCE(t, res, 2)
	// The server sees both ends as EOF (a socketpair cannot carry a
	// reset), but its vroced saw the second stream reset.
	verbstest.WaitFor(t, "the server saw both ends", func() bool { return strings.Count(out.String(), "\n") >= 3 })
	require.NoError(t, srv.Wait(), "the server ends after its two connections")
	assert.True(t, strings.HasPrefix(out.String(), "listening\neof\neof\n"), out.String())
	assert.Contains(t, out.String(), "1 reset by the peer", "SO_LINGER 0 reset the stream")
}

// A program that listens on a socket it never bound (the kernel picks
// its port at listen) is served over vRoCE too: vroced listens first to
// learn the port, which nobody can know before listen returns.
func TestListenWithoutBind(t *testing.T) {
	dir := kit(t, "python3")
	server := `
import socket
l = socket.socket()
l.listen()
l.settimeout(30)
print(l.getsockname()[1], flush=True)
c, _ = l.accept()
c.settimeout(30)
got = b""
while len(got) < 5:
    got += c.recv(5 - len(got))
c.sendall(got[::-1])
c.close()
`
	srv := vroceRun(t, dir, "python3", "-c", server)
	var out streamtest.SyncBuffer
	srv.Stdout, srv.Stderr = &out, &out
	require.NoError(t, srv.Start())
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	verbstest.WaitFor(t, "the server says its port", func() bool { return strings.Contains(out.String(), "\n") })
	port, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(out.String(), "\n", 2)[0]))
	require.NoError(t, err, "the server's first line: %q", out.String())
	assert.True(t, bound(port, "udp", "07"), "port %d's vRoCE device is open", port)

	client := fmt.Sprintf(`
import socket
s = socket.create_connection(("127.0.0.1", %d), timeout=30)
s.sendall(b"hello")
got = b""
while len(got) < 5:
    got += s.recv(5 - len(got))
print("got", got.decode(), flush=True)
`, port)
	res := interposed(t, dir, "python3", "-c", client)
	assert.Contains(t, res, "got olleh")
	overVRoCE(t, res, 1)
	require.NoError(t, srv.Wait())
}
