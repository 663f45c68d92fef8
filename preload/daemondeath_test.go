package preload

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"vroce.dev/internal/testkit/streamtest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vroce.dev/internal/testkit/verbstest"
)

// vrocedOf finds the vroced a vroce-run of pid started.
func vrocedOf(t *testing.T, pid int) int {
	var found int
	verbstest.WaitFor(t, "vroced running", func() bool {
		procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, p := range procs {
			b, err := os.ReadFile(p)
			if err == nil && bytes.Contains(b, []byte(fmt.Sprintf("vroced-%d-", pid))) {
				found, _ = strconv.Atoi(strings.Split(p, "/")[2])
				return true
			}
		}
		return false
	})
	return found
}

// kill -9 of vroced mid-transfer ends the program's stream (EOF or
// reset) rather than leaving it hanging, and the program's next connect
// falls back to TCP.
func TestVrocedKilledMidTransfer(t *testing.T) {
	dir := kit(t, "python3")
	root := t.TempDir()
	big := make([]byte, 256<<20)
	require.NoError(t, os.WriteFile(filepath.Join(root, "big"), big, 0o644))
	port := freePort(t)
	httpServer(t, dir, root, port, false)

	// The client reads slowly; after the first kilobytes it says so and
	// waits for a line on stdin, then reads on to the end, then connects
	// again.
	script := fmt.Sprintf(`
import socket, sys
def get(path):
    s = socket.create_connection(("127.0.0.1", %d))
    s.sendall(b"GET " + path + b" HTTP/1.0\r\n\r\n")
    return s
s = get(b"/big")
s.recv(4096)
print("reading", flush=True)
sys.stdin.readline()
n = 0
try:
    while True:
        b = s.recv(1 << 16)
        if not b:
            break
        n += len(b)
    print("ended after", n, flush=True)
except OSError as e:
    print("ended with", e, flush=True)
s2 = get(b"/")
print("again:", s2.recv(12).decode(), flush=True)
`, port)
	cmd := vroceRun(t, dir, "python3", "-c", script)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr streamtest.SyncBuffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	lines := bufio.NewReader(stdout)
	line, err := lines.ReadString('\n')
	require.NoError(t, err, "%s", stderr.String())
	require.Equal(t, "reading\n", line)

	killed := time.Now()
	require.NoError(t, syscall.Kill(vrocedOf(t, cmd.Process.Pid), syscall.SIGKILL))
	io.WriteString(stdin, "go\n")
	line, err = lines.ReadString('\n')
	require.NoError(t, err, "%s", stderr.String())
	t.Logf("the stream %s %v after the kill", strings.TrimSpace(line), time.Since(killed))
	assert.True(t, strings.HasPrefix(line, "ended"), line)
	n := 0
	fmt.Sscanf(line, "ended after %d", &n)
	assert.Less(t, n, len(big), "the whole file cannot have come after vroced died")

	line, err = lines.ReadString('\n')
	require.NoError(t, err, "%s", stderr.String())
	assert.Equal(t, "again: HTTP/1.0 200\n", line, "a new connect falls back to TCP")
	require.NoError(t, cmd.Wait())
}
