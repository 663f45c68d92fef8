//go:build linux

package plugin

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"vroce.dev/internal/unixsock"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"

	"vroce.dev/providers/plugin/ring"
	"vroce.dev/vroce"
)

// Main is the whole of a plugin binary: it serves desc.Name, a provider
// linked into the binary, to the host that launched it. With the
// argument "describe" it prints desc as JSON instead. It does not return.
//
//	func main() { plugin.Main(plugin.Description{Name: "udp"}) }
func Main(desc Description) {
	desc = describe(desc)
	if len(os.Args) > 1 && os.Args[1] == "describe" {
		b, _ := json.MarshalIndent(desc, "", "  ")
		fmt.Println(string(b))
		os.Exit(0)
	}
	if err := serve(desc, ProtocolVersion); err != nil {
		fmt.Fprintf(os.Stderr, "%s%s: %v\n", binaryPrefix, desc.Name, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// describe completes what a binary says of itself.
func describe(desc Description) Description {
	desc.Protocols = []int{ProtocolVersion}
	desc.RingABI = ring.ABIVersion
	if desc.Version == "" {
		desc.Version = "(devel)"
		if bi, ok := debug.ReadBuildInfo(); ok {
			desc.Version = bi.Main.Version
			for _, s := range bi.Settings {
				if s.Key == "vcs.revision" {
					desc.Version += " " + s.Value
				}
			}
		}
	}
	traits := vroce.TraitsOf(desc.Name)
	desc.ProbesFromASocket = traits.ProbesFromASocket
	desc.DeviceAddr = traits.DeviceAddr != nil
	return desc
}

// serve serves until the host hangs up or kills it. version is the control protocol
// it claims (another only in tests of the refusal).
func serve(desc Description, version int) error {
	if os.Getenv(handshake.MagicCookieKey) != handshake.MagicCookieValue {
		return errors.New("this is a vroce.dev provider plugin: programs start it (VROCE_PROVIDER=plugin:NAME); run it with \"describe\" to see what it is")
	}
	conn, err := unixsock.ConnOf(seqpacketFD)
	if err != nil {
		return fmt.Errorf("no descriptor socket at fd %d (started by something other than vroce.dev?): %w", seqpacketFD, err)
	}
	tlsConfig, err := readCredentials(conn)
	if err != nil {
		return err
	}
	s := &pluginServer{desc: desc, fds: conn, devices: map[uint64]*pluginDevice{}, pending: map[uint64][fdsPerDevice]int{}}
	s.cond = sync.NewCond(&s.mu)
	go func() {
		// The host's hang-up is its death notice (or its last device
		// closing with the process): close everything and go. go-plugin's
		// Serve would wait for a Kill that may never come.
		s.readFDs()
		s.closeAll()
		os.Exit(0)
	}()
	hs := handshake
	hs.ProtocolVersion = uint(version)
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig:  hs,
		VersionedPlugins: map[int]plugin.PluginSet{version: {pluginName: &grpcPlugin{srv: s}}},
		GRPCServer:       plugin.DefaultGRPCServer,
		TLSProvider:      func() (*tls.Config, error) { return tlsConfig, nil },
		Logger:           hclog.New(&hclog.LoggerOptions{Name: binaryPrefix + desc.Name, Output: os.Stderr, Level: hclog.Warn, JSONFormat: true}),
	})
	s.closeAll()
	return nil
}

// pluginServer serves the control calls in the plugin process.
type pluginServer struct {
	desc Description
	fds  *net.UnixConn

	// mu guards devices, pending, hungUp and streams; cond signals a change of
	// pending.
	mu      sync.Mutex
	cond    *sync.Cond
	devices map[uint64]*pluginDevice
	pending map[uint64][fdsPerDevice]int // descriptors come before Open
	hungUp  bool
	streams []chan event
}

// readFDs takes each device's descriptors as the host sends them, until
// it hangs up.
func (s *pluginServer) readFDs() {
	for {
		id, fds, err := recvDeviceFDs(s.fds)
		if errors.Is(err, errFDMessage) {
			continue
		}
		s.mu.Lock()
		if err != nil {
			s.hungUp = true
		} else if _, dup := s.pending[id]; dup {
			unixsock.CloseAll(fds[:]...)
		} else {
			s.pending[id] = fds
		}
		s.cond.Broadcast()
		s.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// takeFDs waits for the descriptors of device id.
func (s *pluginServer) takeFDs(id uint64) ([fdsPerDevice]int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	timeout := time.AfterFunc(controlTimeout, func() {
		s.mu.Lock()
		s.cond.Broadcast()
		s.mu.Unlock()
	})
	defer timeout.Stop()
	start := time.Now()
	for {
		if fds, ok := s.pending[id]; ok {
			delete(s.pending, id)
			return fds, nil
		}
		if s.hungUp || time.Since(start) >= controlTimeout {
			return [fdsPerDevice]int{}, fmt.Errorf("device %d: its rings never came", id)
		}
		s.cond.Wait()
	}
}

func (s *pluginServer) hello(context.Context, struct{}) (Description, error) { return s.desc, nil }

func (s *pluginServer) open(_ context.Context, req openRequest) (openReply, error) {
	fds, err := s.takeFDs(req.ID)
	if err != nil {
		return openReply{}, err
	}
	d, err := openPluginDevice(s, req, fds)
	if err != nil {
		return openReply{}, err
	}
	s.mu.Lock()
	s.devices[req.ID] = d
	s.mu.Unlock()
	return openReply{LocalAddr: d.prov.LocalAddr().String(), MTU: d.prov.MTU(), BatchSize: d.prov.BatchSize()}, nil
}

func (s *pluginServer) device(id uint64) (*pluginDevice, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.devices[id]
	if d == nil {
		return nil, fmt.Errorf("no device %d", id)
	}
	return d, nil
}

func (s *pluginServer) close(_ context.Context, req deviceRequest) (struct{}, error) {
	s.mu.Lock()
	d := s.devices[req.ID]
	delete(s.devices, req.ID)
	s.mu.Unlock()
	if d != nil {
		d.close()
	}
	return struct{}{}, nil
}

func (s *pluginServer) stats(_ context.Context, req deviceRequest) (statsReply, error) {
	d, err := s.device(req.ID)
	if err != nil {
		return statsReply{}, err
	}
	n := d.in.Dropped() + d.sendDrops.Load()
	if dc, ok := d.prov.(vroce.DropCounter); ok {
		n += dc.Dropped()
	}
	return statsReply{Dropped: n}, nil
}

func (s *pluginServer) deviceAddr(_ context.Context, req deviceAddrRequest) (deviceAddrReply, error) {
	peer, err := netip.ParseAddrPort(req.Peer)
	if err != nil {
		return deviceAddrReply{}, err
	}
	addr, err := vroce.DeviceAddrFor(s.desc.Name, peer)
	return deviceAddrReply{Addr: addr}, err
}

func (s *pluginServer) events(ctx context.Context, send func(event) error) error {
	ch := make(chan event, 16)
	s.mu.Lock()
	s.streams = append(s.streams, ch)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.streams = slices.DeleteFunc(s.streams, func(c chan event) bool { return c == ch })
		s.mu.Unlock()
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e := <-ch:
			if err := send(e); err != nil {
				return err
			}
		}
	}
}

// emit sends e to every event stream (a stream too slow to take it loses
// it: the host also sees a dead device in its ring going quiet).
func (s *pluginServer) emit(e event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ch := range s.streams {
		select {
		case ch <- e:
		default:
		}
	}
}

// closeAll closes every device: the host is gone.
func (s *pluginServer) closeAll() {
	s.mu.Lock()
	devs := s.devices
	s.devices = map[uint64]*pluginDevice{}
	for _, fds := range s.pending {
		unixsock.CloseAll(fds[:]...)
	}
	s.pending = nil
	s.mu.Unlock()
	for _, d := range devs {
		d.close()
	}
}

// pluginDevice is a provider of the plugin's, pumped to and from the
// host's rings: in (ring 0) to the network, the network to out (ring 1).
type pluginDevice struct {
	id        uint64
	prov      vroce.Provider
	reg       *ring.Region
	bells     [fdsPerDevice]*ring.Doorbell
	in        *ring.Consumer
	out       *ring.Producer
	busy      time.Duration
	sendDrops atomic.Uint64
	pumps     sync.WaitGroup
	closeOnce sync.Once
}

func openPluginDevice(s *pluginServer, req openRequest, fds [fdsPerDevice]int) (*pluginDevice, error) {
	reg, err := ring.Map(fds[fdRegion], req.Area)
	if err != nil {
		unixsock.CloseAll(fds[fdRegion+1:]...)
		return nil, err
	}
	d := &pluginDevice{id: req.ID, reg: reg}
	for i := fdTxData; i < fdsPerDevice; i++ {
		if d.bells[i], err = ring.DoorbellFromFD(fds[i]); err != nil {
			unixsock.CloseAll(fds[i+1:]...)
			d.release()
			return nil, err
		}
	}
	if d.busy, err = vroce.BusyPollFromEnv(); err != nil {
		d.release()
		return nil, err
	}
	cfg := vroce.ProviderConfig{Addr: req.Addr}
	if len(req.Options) > 0 {
		cfg.Options = json.RawMessage(req.Options)
	}
	if d.prov, err = vroce.OpenProvider(s.desc.Name, cfg); err != nil {
		d.release()
		return nil, err
	}
	d.in = reg.Consumer(0, d.bells[fdTxData], d.bells[fdTxRoom], maxDatagram)
	d.out = reg.Producer(1, d.bells[fdRxData], d.bells[fdRxRoom], maxDatagram)
	d.pumps.Add(2)
	go d.toNetwork(s)
	go d.fromNetwork(s)
	return d, nil
}

// toNetwork sends what the host puts on ring 0.
func (d *pluginDevice) toNetwork(s *pluginServer) {
	defer d.pumps.Done()
	batch := d.prov.BatchSize()
	pkts := make([]vroce.Packet, batch)
	for {
		n := 0
		for n < batch {
			// Lent, not copied: the bytes go to the kernel as they are,
			// and the host may scribble only on its own packets.
			m, data, ok, err := d.in.TryLend()
			if err != nil {
				s.emit(event{ID: d.id, Kind: eventFatal, Err: err.Error()})
				return
			}
			if !ok {
				break
			}
			pkts[n] = vroce.Packet{Data: data, Addr: m.Addr, Coalesce: m.Coalesce}
			n++
		}
		if n > 0 {
			err := d.prov.Send(pkts[:n])
			d.in.Release()
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				// The host's Send has returned; what the network refused
				// is counted as dropped.
				d.sendDrops.Add(uint64(n))
			}
			continue
		}
		d.in.Release()
		if err := d.in.Wait(d.busy); err != nil {
			return
		}
	}
}

// fromNetwork puts what the provider receives on ring 1.
func (d *pluginDevice) fromNetwork(s *pluginServer) {
	defer d.pumps.Done()
	pkts := make([]vroce.Packet, d.prov.BatchSize())
	size := min(maxDatagram, max(d.prov.MTU(), 2048))
	bufs := make([][]byte, len(pkts))
	for i := range bufs {
		bufs[i] = make([]byte, size)
	}
	// A batch receiver lends its packets (the udp provider's GRO
	// segments) straight to the ring, one copy fewer per packet.
	var ringErr error
	deliver := func(n int) bool {
		for i := range n {
			if ringErr = d.put(&pkts[i]); ringErr != nil {
				return false
			}
		}
		ringErr = d.out.Publish()
		return ringErr == nil
	}
	br, lends := d.prov.(vroce.BatchReceiver)
	for {
		for i := range pkts {
			pkts[i].Data = bufs[i]
		}
		var err error
		if lends {
			err = br.RecvEach(pkts, deliver)
		} else {
			var n int
			if n, err = d.prov.Recv(pkts); err == nil {
				deliver(n)
			}
		}
		if ringErr != nil {
			return // the ring is closed or corrupt: the host is going
		}
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				s.emit(event{ID: d.id, Kind: eventFatal, Err: err.Error()})
			}
			return
		}
	}
}

// put writes one packet to ring 1, waiting while it is full.
func (d *pluginDevice) put(pk *vroce.Packet) error {
	for {
		ok, err := d.out.TryPut(ring.Meta{Addr: pk.Addr}, pk.Data, nil, nil)
		if err != nil || ok {
			return err
		}
		if err := d.out.WaitRoom(); err != nil {
			return err
		}
	}
}

func (d *pluginDevice) close() {
	d.closeOnce.Do(func() {
		d.in.Close()
		d.out.Close()
		d.prov.Close()
		d.pumps.Wait()
		d.release()
	})
}

func (d *pluginDevice) release() {
	for _, b := range d.bells {
		if b != nil {
			b.Close()
		}
	}
	d.reg.Close()
}
