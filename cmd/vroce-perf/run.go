package main

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"vroce.dev/internal/workload"
	"vroce.dev/providers/afxdp"
	"vroce.dev/providers/sim"
	"vroce.dev/providers/udp"
	"vroce.dev/vroce"
)

// hello is the client's first control message: the run it asks for.
type hello struct {
	Version int    `json:"version"`
	Params  params `json:"params"`
	Info    info   `json:"info"`
}

// done closes the vRoCE part of a run: the client's results.
type done struct {
	Results []*result `json:"results"`
	Error   string    `json:"error,omitempty"`
}

const protocolVersion = 2 // 2: the hello carries params, not the client's whole config

func run(cfg *config) ([]*result, error) {
	if cfg.Loopback {
		return runLoopback(cfg)
	}
	if cfg.Server == "" {
		return runServer(cfg)
	}
	return runClient(cfg)
}

func (c *config) devConfig(role string, network *sim.Network) vroce.Config {
	addr := c.DevAddr
	if addr == "" {
		switch {
		case c.Provider == "sim":
			addr = map[string]string{"server": "127.0.0.1:4791", "client": "127.0.0.2:4791"}[role]
		case c.Loopback:
			addr = "127.0.0.1:0"
		case role == "server":
			addr = ":4791"
		default:
			addr = ":0"
		}
	}
	dc := vroce.Config{Provider: c.Provider, Addr: addr, MTU: vroce.MTU(c.MTU), ProviderOptions: c.providerOptions()}
	if network != nil {
		dc.ProviderOptions = network
	}
	return dc
}

// providerOptions are what a provider other than sim needs from the flags;
// a plugin of udp or afxdp (plugin:NAME, plugin:/x/vroce-provider-NAME)
// is sent the same, as JSON.
func (c *config) providerOptions() any {
	name := strings.TrimPrefix(filepath.Base(strings.TrimPrefix(c.Provider, "plugin:")), "vroce-provider-")
	switch name {
	case "afxdp":
		return afxdp.Options{Iface: c.Iface}
	case "", "udp":
		if c.BusyPoll > 0 {
			return udp.Options{BusyPoll: c.BusyPoll}
		}
	}
	return nil
}

// runLoopback runs both ends in this process, joined by a loopback TCP
// control connection (which --compare tcp then measures).
func runLoopback(cfg *config) ([]*result, error) {
	var network *sim.Network
	if cfg.Provider == "sim" {
		network = sim.NewNetwork(sim.Config{Seed: 1, Loss: cfg.Loss, Reorder: cfg.Reorder, Duplicate: cfg.Dup, Delay: cfg.Delay})
		defer network.Close()
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	srvCfg := *cfg
	srvCfg.quietProg = true
	errc := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			errc <- err
			return
		}
		defer c.Close()
		_, err = serve(&srvCfg, newControl(c), network)
		errc <- err
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return nil, err
	}
	results, cerr := drive(cfg, newControl(c), network)
	c.Close()
	if serr := <-errc; cerr == nil && serr != nil {
		cerr = fmt.Errorf("server: %w", serr)
	}
	return results, cerr
}

func runServer(cfg *config) ([]*result, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort("", strconv.Itoa(cfg.Port)))
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	if !cfg.JSON {
		fmt.Fprintf(os.Stderr, "vroce-perf: %s server waiting on TCP port %d\n", cfg.Test, cfg.Port)
	}
	return serveOne(cfg, ln)
}

// serveOne serves the first client that connects to ln.
func serveOne(cfg *config, ln net.Listener) ([]*result, error) {
	c, err := ln.Accept()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return serve(cfg, newControl(c), nil)
}

func runClient(cfg *config) ([]*result, error) {
	c, err := net.Dial("tcp", net.JoinHostPort(cfg.Server, strconv.Itoa(cfg.Port)))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return drive(cfg, newControl(c), nil)
}

// controlIP is the address the peer reached us at: the one it should send
// vRoCE packets to.
func controlIP(c net.Conn) netip.Addr {
	ap := c.LocalAddr().(*net.TCPAddr).AddrPort()
	return ap.Addr().Unmap()
}

// A runner is how one kind of test runs over the control connection:
// the client's side (drive) and the server's (serve, given its own
// flags and the run the client asked for).
type runner struct {
	drive func(cfg *config, c *control, network *sim.Network) ([]*result, error)
	serve func(cfg, run *config, h *hello, c *control, network *sim.Network) ([]*result, error)
}

// printsNothing is a server side whose results only the client prints.
func printsNothing(serve func(cfg, run *config, c *control, network *sim.Network) error) func(cfg, run *config, h *hello, c *control, network *sim.Network) ([]*result, error) {
	return func(cfg, run *config, _ *hello, c *control, network *sim.Network) ([]*result, error) {
		return nil, serve(cfg, run, c, network)
	}
}

var (
	verbs  = runner{driveVerbs, serveVerbs}
	stream = runner{driveStream, printsNothing(serveStream)}
	// runners are vroce-perf's own tests, by name; rping and --oob speak
	// other tools' exchanges instead.
	runners = map[string]runner{
		"send_bw": verbs, "write_bw": verbs, "read_bw": verbs,
		"send_lat": verbs, "write_lat": verbs, "read_lat": verbs, "atomic_lat": verbs,
		"conn_rate": {driveConnRate, printsNothing(serveConnRate)}, "stream_bw": stream, "stream_lat": stream,
	}
)

// isTest reports whether name is a test vroce-perf runs.
func isTest(name string) bool {
	_, ok := runners[name]
	return ok || name == "rping" || name == "udaddy" || perftestTests[name]
}

// drive is the client: it runs the test cfg names.
func drive(cfg *config, c *control, network *sim.Network) ([]*result, error) {
	return runners[cfg.Test].drive(cfg, c, network)
}

// driveVerbs is the client of a verbs test: it sets up, tells the server,
// runs the test and the comparison, and returns the results.
func driveVerbs(cfg *config, c *control, network *sim.Network) ([]*result, error) {
	s, err := newSide(cfg, cfg.devConfig("client", network))
	if err != nil {
		return nil, err
	}
	defer s.close()
	if err := c.send(hello{Version: protocolVersion, Params: cfg.params, Info: s.info()}); err != nil {
		return nil, err
	}
	var peer info
	if err := c.recv(&peer); err != nil {
		return nil, err
	}
	if err := s.connect(c, controlIP(c.conn)); err != nil {
		return nil, err
	}
	var ready done // the server has posted its receives
	if err := c.recv(&ready); err != nil {
		return nil, err
	}
	if ready.Error != "" {
		return nil, errors.New("server: " + ready.Error)
	}
	var r *result
	cpu := workload.ProcessCPU()
	if cfg.isLat() {
		r, err = s.clientLat(peer)
	} else {
		r, err = s.clientBW(peer)
	}
	if r != nil {
		r.setCPU(cfg, workload.ProcessCPU()-cpu)
		r.DeviceOpenMs = float64(s.opened) / 1e6
	}
	d := done{}
	if err != nil {
		d.Error = err.Error()
	} else {
		d.Results = []*result{r}
	}
	if serr := c.send(d); err == nil && serr != nil {
		err = serr
	}
	var ack done
	if rerr := c.recv(&ack); err == nil && rerr != nil {
		err = rerr
	}
	if err == nil && ack.Error != "" {
		err = errors.New("server: " + ack.Error)
	}
	if err != nil {
		return nil, err
	}
	results := []*result{r}
	if cfg.Compare == "tcp" {
		cpu := workload.ProcessCPU()
		tr, err := clientTCP(c, cfg)
		if err != nil {
			return results, fmt.Errorf("tcp comparison: %w", err)
		}
		tr.setCPU(cfg, workload.ProcessCPU()-cpu)
		results = append(results, tr)
	}
	return results, nil
}

// serve is the server: it answers a client's hello and serves one run.
func serve(cfg *config, c *control, network *sim.Network) ([]*result, error) {
	var h hello
	if err := c.recv(&h); err != nil {
		return nil, err
	}
	if h.Version != protocolVersion {
		return nil, fmt.Errorf("client speaks protocol %d, we speak %d", h.Version, protocolVersion)
	}
	if h.Params.Test != cfg.Test {
		return nil, fmt.Errorf("client runs %s, this server %s", h.Params.Test, cfg.Test)
	}
	run := *cfg // this end's own flags, and the client's run
	run.params, run.quietProg = h.Params, true
	return runners[run.Test].serve(cfg, &run, &h, c, network)
}

// serveVerbs is the server of a verbs test.
func serveVerbs(cfg, run *config, h *hello, c *control, network *sim.Network) ([]*result, error) {
	s, err := newSide(run, run.devConfig("server", network))
	if err != nil {
		c.send(done{Error: err.Error()})
		return nil, err
	}
	defer s.close()
	if err := c.send(s.info()); err != nil {
		return nil, err
	}
	if err := s.connect(c, controlIP(c.conn)); err != nil {
		return nil, err
	}
	// Receives are posted before the client is told to start.
	if err := s.serverPrepare(); err != nil {
		c.send(done{Error: err.Error()})
		return nil, err
	}
	if err := c.send(done{}); err != nil {
		return nil, err
	}
	if run.isLat() {
		err = s.serverLat(h.Info)
	} else {
		err = s.serverBW()
	}
	if err != nil {
		s.close() // the client's QPs fail within a retry cycle and it asks why
	}
	var d done
	if rerr := c.recv(&d); err == nil && rerr != nil {
		err = rerr
	}
	ack := done{}
	if err != nil {
		ack.Error = err.Error()
	}
	if serr := c.send(ack); err == nil && serr != nil {
		err = serr
	}
	if err != nil {
		return nil, err
	}
	if d.Error != "" {
		return nil, errors.New("client: " + d.Error)
	}
	if run.Compare == "tcp" {
		if err := serverTCP(c, run); err != nil {
			return d.Results, fmt.Errorf("tcp comparison: %w", err)
		}
	}
	if cfg.Loopback {
		return nil, nil // the client prints
	}
	return d.Results, nil
}
