package preload

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

// DaemonMain is vroced: it parses args (without the program name), serves
// until nobody uses it and returns the exit code.
func DaemonMain(args []string) int {
	flag := flag.NewFlagSet("vroced", flag.ContinueOnError)
	name := flag.String("name", "", "the abstract control socket to serve (without @)")
	var o options
	o.define(flag)
	if err := flag.Parse(args); err != nil {
		return 2
	}
	// Our stderr is a pipe vroce-run copies while it runs; once it has
	// gone, a warning must fail to be written, not end the daemon.
	signal.Ignore(syscall.SIGPIPE)
	if *name == "" {
		fmt.Fprintln(os.Stderr, "vroced: --name is required (vroce-run starts vroced; run that)")
		return 2
	}
	cfg, err := o.config()
	if err != nil {
		fmt.Fprintln(os.Stderr, "vroced:", err)
		return 2
	}
	cfg.Name = *name
	cfg.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	d, err := Listen(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("ready") // vroce-run waits for this line
	err = d.Serve()
	if err != nil {
		fmt.Fprintln(os.Stderr, "vroced:", err)
		return 1
	}
	return 0
}
