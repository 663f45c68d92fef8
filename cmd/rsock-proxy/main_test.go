package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"vroce.dev/internal/testkit/streamtest"
	"vroce.dev/rsock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// chain starts the two proxies of the README in front of target: a TCP
// listener carrying each connection over vRoCE to a vRoCE listener that
// connects to target. It returns the TCP address to use and the vRoCE
// side's log.
func chain(t *testing.T, target string) (entry string, vroceLog *streamtest.SyncBuffer) {
	t.Helper()
	vroceLog = new(streamtest.SyncBuffer)
	a, err := start(config{listen: endpoint{vroce: true, addr: "127.0.0.1:0"}, to: endpoint{addr: target}, dialTimeout: 5 * time.Second, verbose: true},
		log.New(vroceLog, "", 0))
	if err != nil {
		t.Fatal(err)
	}
	// Without fallback, as the benchmarks run it: a dial whose probe is
	// answered late waits for it rather than carrying the connection over
	// TCP, which the tests here count against vRoCE (on a loaded CI machine
	// probes took over the 200 ms a falling-back dial waits).
	// TestNoFallbackRefusesATCPTarget covers both settings.
	b, err := start(config{listen: endpoint{addr: "127.0.0.1:0"}, to: endpoint{vroce: true, addr: a.Addr().String()}, dialTimeout: 5 * time.Second, noFallback: true},
		log.New(io.Discard, "", 0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		b.shutdown(time.Second)
		a.shutdown(time.Second)
		drainStreams(t)
	})
	return b.Addr().String(), vroceLog
}

// hashServer reads each connection to EOF, answers with the SHA-256 of
// what it read, and closes: it needs the half-close passed on.
func hashServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				h := sha256.New()
				io.Copy(h, c)
				c.Write(h.Sum(nil))
			})
		}
	})
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return ln.Addr().String()
}

func TestManyConnectionsWithHalfCloseThroughBothProxies(t *testing.T) {
	entry, vroceLog := chain(t, hashServer(t))
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			c, err := net.Dial("tcp", entry)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			data := make([]byte, 100000+i*777)
			r := rand.New(rand.NewPCG(uint64(i), 1))
			for k := range data {
				data[k] = byte(r.Uint32())
			}
			if _, err := c.Write(data); err != nil {
				t.Error(err)
				return
			}
			c.(*net.TCPConn).CloseWrite()
			got, err := io.ReadAll(c)
			want := sha256.Sum256(data)
			if err != nil || !bytes.Equal(got, want[:]) {
				t.Errorf("connection %d: answer %x, %v; want %x", i, got, err, want)
			}
		})
	}
	wg.Wait()
	if n := strings.Count(vroceLog.String(), "(vroce) ->"); n != 16 {
		t.Fatalf("%d of 16 connections reached the vRoCE side over vRoCE:\n%s", n, vroceLog)
	}
}

func TestShutdownLetsOpenConnectionsFinish(t *testing.T) {
	backend := hashServer(t)
	p, err := start(config{listen: endpoint{addr: "127.0.0.1:0"}, to: endpoint{addr: backend}, dialTimeout: time.Second}, log.New(io.Discard, "", 0))
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", p.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("in flight"))
	for p.openCount() == 0 { // the proxy has the connection
		time.Sleep(time.Millisecond)
	}
	done := make(chan struct{})
	go func() { p.shutdown(5 * time.Second); close(done) }()
	for { // no new connections once shutdown began
		if c2, err := net.Dial("tcp", p.Addr().String()); err != nil {
			break
		} else {
			c2.Close()
		}
		time.Sleep(time.Millisecond)
	}
	c.(*net.TCPConn).CloseWrite()
	got, _ := io.ReadAll(c)
	if want := sha256.Sum256([]byte("in flight")); !bytes.Equal(got, want[:]) {
		t.Fatalf("the open connection did not finish: %x", got)
	}
	<-done
}

func TestParseEndpoint(t *testing.T) {
	for _, bad := range []string{"", ":9000", "udp://x:1", "vroce://x", "tcp://host:80/path", "vroce//x:1"} {
		if _, err := parseEndpoint(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if e, err := parseEndpoint("vroce://[::1]:9000"); err != nil || !e.vroce || e.addr != "[::1]:9000" {
		t.Fatalf("%+v %v", e, err)
	}
}

// TestUnmodifiedServerBehindTheProxy: Python's http.server, fetched by
// curl, both unaware of vRoCE, through the two proxies.
func TestUnmodifiedServerBehindTheProxy(t *testing.T) {
	python, perr := exec.LookPath("python3")
	curl, cerr := exec.LookPath("curl")
	if perr != nil || cerr != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("python3 and curl are needed; .ci/run installs them")
		}
		t.Skip("python3 or curl not installed (apt-get install python3 curl); CI runs this test")
	}
	dir := t.TempDir()
	content := bytes.Repeat([]byte("served by python, carried by vRoCE\n"), 30000)
	if err := os.WriteFile(filepath.Join(dir, "file.txt"), content, 0o644); err != nil {
		t.Fatal(err)
	}
	free, _ := net.Listen("tcp", "127.0.0.1:0")
	port := free.Addr().(*net.TCPAddr).Port
	free.Close()
	srv := exec.Command(python, "-m", "http.server", "--bind", "127.0.0.1", "--directory", dir, fmt.Sprint(port))
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { srv.Process.Kill(); srv.Wait() }()
	backend := fmt.Sprintf("127.0.0.1:%d", port)
	for deadline := time.Now().Add(10 * time.Second); ; { // python takes a moment to listen
		if c, err := net.Dial("tcp", backend); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("python's http.server did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
	entry, vroceLog := chain(t, backend)
	out, err := exec.Command(curl, "-sS", "--fail", "http://"+entry+"/file.txt").Output()
	if err != nil {
		t.Fatalf("curl: %v", err)
	}
	if !bytes.Equal(out, content) {
		t.Fatalf("curl got %d bytes, want the file's %d", len(out), len(content))
	}
	if !strings.Contains(vroceLog.String(), "(vroce) ->") {
		t.Fatalf("the request did not cross vRoCE:\n%s", vroceLog)
	}
}

// With --no-fallback, a vroce:// target that is a plain TCP server is
// refused rather than reached over TCP; without it (the positive
// control), the same connection works over TCP.
func TestNoFallbackRefusesATCPTarget(t *testing.T) {
	target := hashServer(t)
	for _, noFallback := range []bool{false, true} {
		var logged streamtest.SyncBuffer
		p, err := start(config{listen: endpoint{addr: "127.0.0.1:0"}, to: endpoint{vroce: true, addr: target},
			dialTimeout: 5 * time.Second, noFallback: noFallback}, log.New(&logged, "", 0))
		if err != nil {
			t.Fatal(err)
		}
		c, err := net.Dial("tcp", p.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte("hello"))
		c.(*net.TCPConn).CloseWrite()
		got, _ := io.ReadAll(c)
		c.Close()
		want := sha256.Sum256([]byte("hello"))
		switch {
		case !noFallback && !bytes.Equal(got, want[:]):
			t.Errorf("with fallback: answer %x, want %x; log:\n%s", got, want, logged.String())
		case noFallback && len(got) != 0:
			t.Errorf("--no-fallback reached a TCP target: answer %x", got)
		case noFallback && !strings.Contains(logged.String(), "connecting to vroce://"):
			t.Errorf("--no-fallback: the refusal is not logged:\n%s", logged.String())
		}
		p.shutdown(time.Second)
	}
	drainStreams(t)
}

// The state report (SIGUSR1) lists an open connection with its vRoCE
// stream's transport state: the bytes that crossed it so far, and why it
// might wait.
func TestReportShowsOpenStreams(t *testing.T) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- streamtest.ServeEcho(echo) }()
	p, err := start(config{listen: endpoint{vroce: true, addr: "127.0.0.1:0"}, to: endpoint{addr: echo.Addr().String()}, dialTimeout: 5 * time.Second},
		log.New(io.Discard, "", 0))
	if err != nil {
		t.Fatal(err)
	}
	c, err := (&rsock.Dialer{NoFallback: true}).Dial("tcp", p.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	msg := []byte("what crossed so far")
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, make([]byte, len(msg))); err != nil {
		t.Fatal(err)
	}

	// The stream counts what the proxy's copies have read and written
	// once each copy's write returns, which may be after the echo came
	// back: the report is asked again until it says so.
	line := regexp.MustCompile(fmt.Sprintf(`(?m)\A1 connections open, 1 served\n  %[1]s -> %[2]s, open \S+; vroce %[1]s: rtt \S+, window [1-9]\d*, %[3]d bytes in, %[3]d out, \d+ retransmissions, \d+ timeouts, \d+ RNR waits, \d+ budget stops\n\z`,
		regexp.QuoteMeta(c.LocalAddr().String()), regexp.QuoteMeta(echo.Addr().String()), len(msg)))
	awaitReport(t, p, line)

	c.Close()
	p.shutdown(5 * time.Second)
	echo.Close()
	<-served
	var report bytes.Buffer
	p.report(&report)
	if got := report.String(); got != "0 connections open, 1 served\n" {
		t.Fatalf("report after the connection closed: %q", got)
	}
	drainStreams(t)
}

// TestReportShowsAConnectionStillConnecting: a client whose target has
// not answered yet is in the report as connecting, from the moment it
// was accepted. The target takes the TCP connection of a SOCKET dial
// and swallows its service probe on the UDP port of the same number, so
// the dial, which may not fall back, waits for the probe for seconds.
// (With nothing on the UDP port the ICMP answer fails it at once.)
func TestReportShowsAConnectionStillConnecting(t *testing.T) {
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	swallow, err := net.ListenPacket("udp", silent.Addr().String())
	require.NoError(t, err)
	defer swallow.Close()
	held := make(chan net.Conn, 1)
	go func() {
		if c, err := silent.Accept(); err == nil {
			held <- c
		}
		close(held)
	}()
	p, err := start(config{listen: endpoint{addr: "127.0.0.1:0"}, to: endpoint{vroce: true, addr: silent.Addr().String()},
		mode: rsock.ModeSocket, noFallback: true, dialTimeout: 30 * time.Second}, log.New(io.Discard, "", 0))
	require.NoError(t, err)
	c, err := net.Dial("tcp", p.Addr().String())
	require.NoError(t, err)
	line := regexp.MustCompile(fmt.Sprintf(`(?m)\A1 connections open, 0 served\n  %s -> vroce://%s, connecting for \S+\n\z`,
		regexp.QuoteMeta(c.LocalAddr().String()), regexp.QuoteMeta(silent.Addr().String())))
	awaitReport(t, p, line)
	c.Close()
	p.shutdown(0)
	silent.Close()
	if c, ok := <-held; ok {
		c.Close()
	}
	drainStreams(t)
}

// awaitReport asks p for its report until it matches line, within 10 s,
// and logs it: the state it shows can trail what the test did (a
// stream's byte counts, a dial's start).
func awaitReport(t *testing.T, p *proxy, line *regexp.Regexp) {
	t.Helper()
	var report bytes.Buffer
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		report.Reset()
		p.report(&report)
		if line.Match(report.Bytes()) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("report %q does not match %s", report.String(), line)
		}
	}
	t.Logf("report:\n%s", &report)
}

// drainStreams waits, within 10 s, for every rsock stream the test left
// to finish closing.
func drainStreams(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := rsock.Drain(ctx); err != nil {
		t.Error(err)
	}
}

// The program answers SIGUSR1 with the report and keeps serving; SIGTERM
// still stops it.
func TestSIGUSR1PrintsTheReport(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "rsock-proxy")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "--listen", "tcp://127.0.0.1:0", "--to", "tcp://127.0.0.1:9")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	// A proxy that never prints what is awaited is killed, which ends
	// its output and the wait.
	stuck := time.AfterFunc(30*time.Second, func() { cmd.Process.Kill() })
	defer stuck.Stop()
	lines := bufio.NewScanner(stderr)
	expect := func(what string) {
		t.Helper()
		for lines.Scan() {
			if strings.Contains(lines.Text(), what) {
				return
			}
		}
		t.Fatalf("rsock-proxy ended its output without %q (%v)", what, lines.Err())
	}
	expect("listening on tcp://127.0.0.1:0")
	for range 2 { // and again: the first report did not stop it
		if err := cmd.Process.Signal(syscall.SIGUSR1); err != nil {
			t.Fatal(err)
		}
		expect("0 connections open, 0 served")
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	expect("stopped: 0 connections served")
	if err := cmd.Wait(); err != nil {
		t.Fatalf("rsock-proxy after SIGTERM: %v", err)
	}
}
