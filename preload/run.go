package preload

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
)

// RunMain is vroce-run: it parses args (without the program name) and
// returns the exit code.
func RunMain(args []string) int {
	flag := flag.NewFlagSet("vroce-run", flag.ContinueOnError)
	var o options
	o.define(flag)
	flag.Usage = func() {
		fmt.Fprintln(flag.Output(), "usage: vroce-run [flags] -- PROGRAM ARGS")
		flag.PrintDefaults()
	}
	if err := flag.Parse(args); err != nil {
		return 2
	}
	if flag.NArg() == 0 {
		flag.Usage()
		return 2
	}
	// Checked here, before anything starts, as vroced will check them.
	if _, err := o.config(); err != nil {
		fmt.Fprintln(os.Stderr, "vroce-run:", err)
		return 2
	}
	code, err := run(flag.Args(), o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "vroce-run:", err)
		return 1
	}
	return code
}

func run(argv []string, o options) (int, error) {
	exe, err := os.Executable()
	if err != nil {
		return 0, err
	}
	dir := filepath.Dir(exe)
	lib := os.Getenv("VROCE_PRELOAD")
	if lib == "" {
		lib = filepath.Join(dir, "libvroce-preload.so")
	}
	if _, err := os.Stat(lib); err != nil {
		return 0, fmt.Errorf("the interposer: %w (make build makes bin/libvroce-preload.so)", err)
	}
	var rnd [6]byte
	rand.Read(rnd[:])
	name := fmt.Sprintf("vroced-%d-%s", os.Getpid(), hex.EncodeToString(rnd[:]))

	passed, err := o.args()
	if err != nil {
		return 0, err
	}
	args := append([]string{"--name", name}, passed...)
	vroced := os.Getenv("VROCED")
	if vroced == "" {
		vroced = filepath.Join(dir, "vroced")
	}
	daemon := exec.Command(vroced, args...)
	// vroced's warnings reach our stderr through a pipe we copy while we
	// run: it may outlive us, and must not hold our caller's stderr open
	// (a pipeline reading it would never end).
	logs, err := daemon.StderrPipe()
	if err != nil {
		return 0, err
	}
	daemon.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // it may outlive us
	out, err := daemon.StdoutPipe()
	if err != nil {
		return 0, err
	}
	if err := daemon.Start(); err != nil {
		return 0, fmt.Errorf("starting vroced: %w", err)
	}
	go io.Copy(os.Stderr, logs)
	go daemon.Wait()
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
		return 0, fmt.Errorf("vroced did not start (%q, %v)", line, err)
	}
	// Our own client keeps the daemon up until the program has run.
	ctl, err := Dial(name)
	if err != nil {
		return 0, err
	}
	defer ctl.Close()

	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), "LD_PRELOAD="+preloadList(lib), "VROCED_ADDR=@"+name)
	if o.noFallback {
		cmd.Env = append(cmd.Env, "VROCE_NO_FALLBACK=1")
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	go func() {
		for s := range sigs {
			cmd.Process.Signal(s)
		}
	}()
	werr := cmd.Wait()
	signal.Stop(sigs)
	code := 0
	var ee *exec.ExitError
	if errors.As(werr, &ee) {
		code = ee.ExitCode()
		if code < 0 {
			code = 128 + int(ee.Sys().(syscall.WaitStatus).Signal())
		}
	} else if werr != nil {
		return 0, werr
	}
	if s, err := ctl.Stats(); err == nil {
		report(argv[0], s)
	}
	return code, nil
}

// preloadList puts lib first in $LD_PRELOAD, keeping what was there.
func preloadList(lib string) string {
	if old := os.Getenv("LD_PRELOAD"); old != "" {
		return lib + " " + old
	}
	return lib
}

func report(prog string, s Stats) {
	if s.Processes == 0 {
		fmt.Fprintf(os.Stderr, "vroce-run: %s was not interposed (a static or setuid binary, a Go program, or one doing I/O through io_uring): nothing went over vRoCE\n", prog)
		return
	}
	fmt.Fprintf(os.Stderr, "vroce-run: %d connections over vRoCE (%d bytes; %d by RDMA_CM; %d reset by the peer), %d over TCP (%d bytes bridged), %d processes interposed\n",
		s.VRoCEConns, s.VRoCEBytes, s.VRoCECM, s.Resets, s.TCPConns, s.TCPBytes, s.Processes)
}
