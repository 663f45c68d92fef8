package preload

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// One thread's blocking connect, while vroced dials (here a service whose
// vRoCE probe is never answered, and which may not fall back: five
// seconds), stops no other thread: the main thread's close of an
// unrelated descriptor returns at once, before the connect does. The
// interposer once held its one lock across the daemon's round trip. And
// a child forked meanwhile, which inherits that round trip's lock held,
// connects at once on a control socket of its own (to a plain TCP peer:
// refused, as this run may not fall back).
func TestAConnectThatWaitsStopsNoOtherThread(t *testing.T) {
	dir := kit(t, "python3")
	tcp, err := net.Listen("tcp", "127.0.0.1:0") // never accepts: the kernel completes connects anyway
	require.NoError(t, err)
	defer tcp.Close()
	port := tcp.Addr().(*net.TCPAddr).Port
	plain, err := net.Listen("tcp", "127.0.0.1:0") // nothing on its UDP twin: refused at once
	require.NoError(t, err)
	defer plain.Close()
	silent, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
	require.NoError(t, err, "the UDP twin, where the probe goes unanswered")
	defer silent.Close()

	script := fmt.Sprintf(`
import os, signal, socket, sys, threading
r, w = os.pipe()
def say(line):  # one write a line: two threads' prints interleave
    sys.stdout.write(line + "\n")
    sys.stdout.flush()
def dial(port, who):
    s = socket.socket()
    try:
        s.connect(("127.0.0.1", port))
        say(who + "connect returned")
    except OSError as e:
        say(who + "connect returned %%d" %% e.errno)
t = threading.Thread(target=dial, args=(%d, ""))
t.start()
sys.stdin.readline()
os.close(r)
say("closed")
pid = os.fork()
if pid == 0:
    signal.alarm(20)  # a child stuck on a lock says nothing
    dial(%d, "child ")
    os._exit(0)
os.waitpid(pid, 0)
t.join()
`, port, plain.Addr().(*net.TCPAddr).Port)
	cmd := vroceRunFlags(t, dir, []string{"--no-fallback"}, "python3", "-c", script)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })

	// The probe's arrival says vroced is dialing for the thread.
	require.NoError(t, silent.SetReadDeadline(time.Now().Add(30*time.Second)))
	_, _, err = silent.ReadFromUDP(make([]byte, 2048))
	require.NoError(t, err, "vroced's probe")
	_, err = stdin.Write([]byte("close\n"))
	require.NoError(t, err)

	lines := bufio.NewScanner(stdout)
	var got []string
	for len(got) < 3 && lines.Scan() {
		if l := strings.TrimSpace(lines.Text()); l == "closed" || strings.Contains(l, "connect returned") {
			got = append(got, l)
		}
	}
	require.Len(t, got, 3, "both threads and the child report: %q", got)
	assert.Equal(t, "closed", got[0], "the close waited for the other thread's connect")
	assert.Equal(t, "child connect returned 111", got[1], "the child, before the parent's dial ends")
	assert.True(t, strings.HasPrefix(got[2], "connect returned"))
}
