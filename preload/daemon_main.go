package preload

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"vroce.dev/rsock"
)

// DaemonMain is vroced: it parses args (without the program name), serves
// until nobody uses it and returns the exit code.
func DaemonMain(args []string) int {
	flag := flag.NewFlagSet("vroced", flag.ContinueOnError)
	name := flag.String("name", "", "the abstract control socket to serve (without @)")
	mode := flag.String("mode", "socket", "how connections are made: socket (over the program's TCP connection) or cm (RDMA_CM, no TCP)")
	noFallback := flag.Bool("no-fallback", false, "refuse connections to peers that do not speak vRoCE")
	ports := flag.String("ports", "", "comma-separated ports to take over (default all)")
	rulesFile := flag.String("rules", "", "a rules file: which addresses to take over (see preload.Rule)")
	provider := flag.String("provider", "", "packet provider (default $VROCE_PROVIDER, then udp)")
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
	if *mode != rsock.ModeSocket && *mode != rsock.ModeCM {
		fmt.Fprintf(os.Stderr, "vroced: --mode %q: socket or cm\n", *mode)
		return 2
	}
	cfg := Config{Name: *name, Mode: *mode, NoFallback: *noFallback, Provider: *provider,
		Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	for _, p := range strings.Split(*ports, ",") {
		if p == "" {
			continue
		}
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil {
			fmt.Fprintf(os.Stderr, "vroced: port %q: %v\n", p, err)
			return 2
		}
		cfg.Ports = append(cfg.Ports, uint16(n))
	}
	if *rulesFile != "" {
		f, err := os.Open(*rulesFile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "vroced:", err)
			return 2
		}
		cfg.Rules, err = ParseRules(f)
		f.Close()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
	}
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
