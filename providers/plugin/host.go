//go:build linux

package plugin

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"vroce.dev/providers/plugin/ring"
	"vroce.dev/vroce"
)

// process is one running plugin binary and the devices it serves for
// this host process.
type process struct {
	path   string
	client *plugin.Client
	ctl    controlClient
	fds    *net.UnixConn // the host's end of the descriptor socket
	desc   Description
	pid    int
	nextID atomic.Uint64
	stop   context.CancelFunc // ends the event stream
	gone   chan struct{}      // closed when watch has seen the plugin die
	events chan struct{}      // closed when the event stream has ended

	// mu guards devices and dead; the process owns both.
	mu      sync.Mutex
	devices map[uint64]*device
	dead    error // why the plugin is gone; nil while it runs
}

// processes holds the running plugins, one per binary (and checksum).
var processes struct {
	sync.Mutex
	m map[string]*process
}

// controlTimeout bounds a control call: a plugin that does not answer
// in it is treated as gone.
const controlTimeout = 10 * time.Second

// processFor returns the running plugin of path, starting one if none
// runs or the last one died.
func processFor(path string, checksum []byte) (*process, error) {
	key := path + "\x00" + string(checksum)
	processes.Lock()
	defer processes.Unlock()
	if p := processes.m[key]; p != nil && p.alive() {
		return p, nil
	}
	p, err := launch(path, checksum)
	if err != nil {
		return nil, err
	}
	if processes.m == nil {
		processes.m = map[string]*process{}
	}
	processes.m[key] = p
	return p, nil
}

// launch starts the plugin at path and says hello.
func launch(path string, checksum []byte) (*process, error) {
	host, child, err := socketpair()
	if err != nil {
		return nil, err
	}
	tlsConfig, creds, err := newCredentials()
	if err == nil {
		// The plugin's first read: it is waiting in the socket before the
		// plugin starts.
		_, err = host.Write(creds)
	}
	if err != nil {
		host.Close()
		child.Close()
		return nil, fmt.Errorf("vroce plugin %s: credentials: %w", path, err)
	}
	cmd := exec.Command(path)
	cmd.ExtraFiles = []*os.File{child} // fd 3: seqpacketFD
	cfg := &plugin.ClientConfig{
		HandshakeConfig:  handshake,
		VersionedPlugins: map[int]plugin.PluginSet{ProtocolVersion: {pluginName: &grpcPlugin{}}},
		Cmd:              cmd,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		TLSConfig:        tlsConfig, // mtls.go: why not AutoMTLS
		Managed:          true,
		Logger:           hostLogger(path),
		StartTimeout:     controlTimeout,
	}
	if checksum != nil {
		cfg.SecureConfig = &plugin.SecureConfig{Checksum: checksum, Hash: sha256.New()}
	}
	client := plugin.NewClient(cfg)
	p, err := start(client, path, host)
	child.Close() // the plugin has its copy; ours would hide its hang-up
	if err != nil {
		client.Kill()
		host.Close()
		return nil, err
	}
	return p, nil
}

func start(client *plugin.Client, path string, host *net.UnixConn) (*process, error) {
	rpc, err := client.Client()
	if err != nil {
		return nil, launchError(path, err)
	}
	raw, err := rpc.Dispense(pluginName)
	if err != nil {
		return nil, fmt.Errorf("vroce plugin %s: %w", path, err)
	}
	p := &process{path: path, client: client, ctl: raw.(controlClient), fds: host, devices: map[uint64]*device{},
		gone: make(chan struct{}), events: make(chan struct{})}
	if rc := client.ReattachConfig(); rc != nil {
		p.pid = rc.Pid
	}
	ctx, cancel := context.WithTimeout(context.Background(), controlTimeout)
	defer cancel()
	if err := p.ctl.call(ctx, "Hello", struct{}{}, &p.desc); err != nil {
		return nil, fmt.Errorf("vroce plugin %s: hello: %w", path, err)
	}
	if p.desc.RingABI != ring.ABIVersion {
		return nil, fmt.Errorf("vroce plugin %s: it maps ring ABI %d, this program ring ABI %d: rebuild one of them from the same vroce.dev", path, p.desc.RingABI, ring.ABIVersion)
	}
	evctx, stop := context.WithCancel(context.Background())
	p.stop = stop
	go p.watch()
	go func() {
		defer close(p.events)
		p.ctl.events(evctx, p.onEvent)
	}()
	return p, nil
}

// launchError says what went wrong in go-plugin's terms and ours.
func launchError(path string, err error) error {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "Unrecognized remote plugin message"):
		return fmt.Errorf("vroce plugin %s printed to stdout before it served (go-plugin's handshake is its first line of stdout, so a plugin must write nothing there): %w", path, err)
	case strings.Contains(strings.ToLower(msg), "incompatible api version"):
		return fmt.Errorf("vroce plugin %s speaks another control protocol than this program's version %d: %w", path, ProtocolVersion, err)
	case errors.Is(err, plugin.ErrChecksumsDoNotMatch):
		return fmt.Errorf("vroce plugin %s: its SHA-256 is not the one pinned: %w", path, err)
	}
	return fmt.Errorf("vroce plugin %s: %w", path, err)
}

// alive says the plugin still runs.
func (p *process) alive() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dead == nil
}

// watch waits for the plugin's end of the descriptor socket to hang up,
// which the kernel does the moment the process dies, and fails every
// device it served.
func (p *process) watch() {
	var b [1]byte
	_, err := p.fds.Read(b[:])
	if err == nil {
		err = errors.New("it wrote to the descriptor socket")
	}
	p.die(fmt.Errorf("%w: plugin %s (pid %d) is gone (%v)", vroce.ErrProviderFailed, p.path, p.pid, err))
	<-p.events
	close(p.gone)
}

// die marks the plugin gone, fails its devices and reaps it.
func (p *process) die(why error) {
	p.mu.Lock()
	if p.dead != nil {
		p.mu.Unlock()
		return
	}
	p.dead = why
	devs := make([]*device, 0, len(p.devices))
	for _, d := range p.devices {
		devs = append(devs, d)
	}
	p.mu.Unlock()
	for _, d := range devs {
		d.fail(why)
	}
	p.stop()
	p.fds.Close()
	p.client.Kill()
}

// onEvent takes an event the plugin sent.
func (p *process) onEvent(e event) {
	if e.Kind != eventFatal {
		return
	}
	p.mu.Lock()
	d := p.devices[e.ID]
	p.mu.Unlock()
	if d != nil {
		d.fail(fmt.Errorf("%w: in plugin %s: %s", vroce.ErrProviderFailed, p.path, e.Err))
	}
}

// open opens a device in the plugin.
func (p *process) open(addr string, options []byte) (*device, error) {
	id := p.nextID.Add(1)
	d, fds, err := newDevice(p, id)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	if p.dead != nil {
		p.mu.Unlock()
		d.release()
		return nil, p.dead
	}
	p.devices[id] = d
	p.mu.Unlock()
	fail := func(err error) (*device, error) {
		p.forget(id)
		d.release()
		return nil, err
	}
	if err := sendDeviceFDs(p.fds, id, fds); err != nil {
		return fail(fmt.Errorf("vroce plugin %s: passing the rings: %w", p.path, err))
	}
	ctx, cancel := context.WithTimeout(context.Background(), controlTimeout)
	defer cancel()
	var rep openReply
	if err := p.ctl.call(ctx, "Open", openRequest{ID: id, Addr: addr, Options: options, Area: ringArea}, &rep); err != nil {
		return fail(fmt.Errorf("vroce plugin %s: %w", p.path, err))
	}
	if err := d.setReply(rep); err != nil {
		p.closeRemote(id)
		return fail(fmt.Errorf("vroce plugin %s: %w", p.path, err))
	}
	return d, nil
}

// forget drops a closed device.
func (p *process) forget(id uint64) {
	p.mu.Lock()
	delete(p.devices, id)
	p.mu.Unlock()
}

// closeRemote asks the plugin to close device id; a plugin that is gone
// has nothing left to close.
func (p *process) closeRemote(id uint64) {
	if !p.alive() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), controlTimeout)
	defer cancel()
	p.ctl.call(ctx, "Close", deviceRequest{ID: id}, nil)
}

// grpcPlugin is the go-plugin side of the control service.
type grpcPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	srv controlServer // set in the plugin process only
}

func (g *grpcPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	s.RegisterService(&controlDesc, g.srv)
	return nil
}

func (g *grpcPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return controlClient{conn: c}, nil
}

// hostLogger routes go-plugin's logging (its own and the lines the
// plugin writes to stderr) to log/slog's default logger, at warnings and
// above unless $VROCE_PLUGIN_LOG names another level.
func hostLogger(path string) hclog.Logger {
	level := hclog.LevelFromString(os.Getenv("VROCE_PLUGIN_LOG"))
	if level == hclog.NoLevel {
		level = hclog.Warn
	}
	return hclog.New(&hclog.LoggerOptions{
		Name:        "vroce-plugin",
		Level:       level,
		Output:      slogWriter{path: path},
		DisableTime: true,
	})
}

// slogWriter takes hclog's lines to slog.
type slogWriter struct{ path string }

func (w slogWriter) Write(b []byte) (int, error) {
	slog.Warn(string(bytes.TrimSpace(b)), "plugin", w.path)
	return len(b), nil
}
