package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	_ "vroce.dev/providers/udp" // the packet provider this program links
	"vroce.dev/rsock"
)

// The demo service's messages.
type (
	// Msg carries text one way or the other.
	Msg struct{ Text string }
	// Num carries a number.
	Num struct{ N int64 }
)

// jsonCodec lets the example declare its service without generated code.
type jsonCodec struct{}

func (jsonCodec) Marshal(v any) ([]byte, error)   { return json.Marshal(v) }
func (jsonCodec) Unmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }
func (jsonCodec) Name() string                    { return "json" }
func init()                                       { encoding.RegisterCodec(jsonCodec{}) }
func callOpts() grpc.DialOption                   { return grpc.WithDefaultCallOptions(grpc.CallContentSubtype("json")) }
func method(name string) string                   { return "/demo.Demo/" + name }
func streamDesc(name string, c, s bool) *grpc.StreamDesc {
	return &grpc.StreamDesc{StreamName: name, ClientStreams: c, ServerStreams: s}
}

// demo implements the service.
type demo struct{}

var serviceDesc = grpc.ServiceDesc{
	ServiceName: "demo.Demo",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{MethodName: "Echo", Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
		var m Msg
		if err := dec(&m); err != nil {
			return nil, err
		}
		return &Msg{Text: m.Text}, nil
	}}},
	Streams: []grpc.StreamDesc{
		{StreamName: "Count", ServerStreams: true, Handler: func(_ any, s grpc.ServerStream) error {
			var n Num
			if err := s.RecvMsg(&n); err != nil {
				return err
			}
			for i := int64(1); i <= n.N; i++ {
				if err := s.SendMsg(&Num{N: i}); err != nil {
					return err
				}
			}
			return nil
		}},
		{StreamName: "Sum", ClientStreams: true, Handler: func(_ any, s grpc.ServerStream) error {
			var sum int64
			for {
				var n Num
				err := s.RecvMsg(&n)
				if errors.Is(err, io.EOF) {
					return s.SendMsg(&Num{N: sum})
				}
				if err != nil {
					return err
				}
				sum += n.N
			}
		}},
		{StreamName: "Chat", ClientStreams: true, ServerStreams: true, Handler: func(_ any, s grpc.ServerStream) error {
			for {
				var m Msg
				err := s.RecvMsg(&m)
				if errors.Is(err, io.EOF) {
					return nil
				}
				if err != nil {
					return err
				}
				if err := s.SendMsg(&Msg{Text: "re: " + m.Text}); err != nil {
					return err
				}
			}
		}},
	},
}

// config is one run.
type config struct {
	Calls       int
	Concurrency int
	Mode        string
}

// result is one transport's figures.
type result struct {
	Transport, ServerTransport string
	Calls                      int
	PerSecond                  float64
	P50, P99                   time.Duration
}

func (r result) String() string {
	return fmt.Sprintf("unary over %-5s (server side: %-5s) %6d calls  %8.0f calls/s  p50 %7.1f us  p99 %7.1f us; streams and health checked",
		r.Transport, r.ServerTransport, r.Calls, r.PerSecond, float64(r.P50)/1e3, float64(r.P99)/1e3)
}

func main() {
	var cfg config
	flag.IntVar(&cfg.Calls, "calls", 2000, "unary calls per transport")
	flag.IntVar(&cfg.Concurrency, "concurrency", 8, "calls in flight")
	flag.StringVar(&cfg.Mode, "mode", "", "rsock connection mode: socket or cm (default $RSOCK_MODE, then socket)")
	flag.Parse()
	var rs []result
	for _, overVRoCE := range []bool{true, false} {
		r, err := measure(context.Background(), cfg, overVRoCE)
		if err != nil {
			fmt.Fprintln(os.Stderr, "grpc-over-vroce:", err)
			os.Exit(1)
		}
		fmt.Println(r)
		rs = append(rs, r)
	}
	fmt.Printf("proved: a grpc.Server on an rsock listener answered unary, server-, client- and bidirectional-streaming calls and health checks over vRoCE (both ends report transport %q), %d unary calls checked; %.2fx TCP's calls/s, p50 %.1fx TCP's\n",
		rs[0].ServerTransport, rs[0].Calls, rs[0].PerSecond/rs[1].PerSecond, float64(rs[0].P50)/float64(rs[1].P50))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rsock.Drain(ctx)
}

func transportOf(c net.Conn) string {
	if t, ok := c.(interface{ Transport() string }); ok {
		return t.Transport()
	}
	return "tcp"
}

// recordingListener notes the transport of what it accepts.
type recordingListener struct {
	net.Listener
	seen atomic.Value
}

func (l *recordingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.seen.Store(transportOf(c))
	}
	return c, err
}

// measure serves and calls over one transport.
func measure(ctx context.Context, cfg config, overVRoCE bool) (result, error) {
	var ln net.Listener
	var err error
	if overVRoCE {
		ln, err = (&rsock.ListenConfig{Mode: cfg.Mode}).Listen(ctx, "tcp", "127.0.0.1:0")
	} else {
		ln, err = net.Listen("tcp", "127.0.0.1:0")
	}
	if err != nil {
		return result{}, err
	}
	rl := &recordingListener{Listener: ln}
	srv := grpc.NewServer()
	srv.RegisterService(&serviceDesc, demo{})
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(rl) }()
	defer func() { srv.Stop(); <-served }()

	var clientSide atomic.Value
	dial := (&net.Dialer{}).DialContext
	if overVRoCE {
		dial = (&rsock.Dialer{Mode: cfg.Mode, NoFallback: true}).DialContext
	}
	conn, err := grpc.NewClient("passthrough:///"+ln.Addr().String(), callOpts(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			c, err := dial(ctx, "tcp", addr)
			if err == nil {
				clientSide.Store(transportOf(c))
			}
			return c, err
		}))
	if err != nil {
		return result{}, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := checkEveryKind(ctx, conn); err != nil {
		return result{}, err
	}
	r, err := unary(ctx, conn, cfg)
	if err != nil {
		return result{}, err
	}
	r.Transport, _ = clientSide.Load().(string)
	r.ServerTransport, _ = rl.seen.Load().(string)
	return r, nil
}

// checkEveryKind makes one call of each kind and checks the answers.
func checkEveryKind(ctx context.Context, conn *grpc.ClientConn) error {
	hr, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || hr.Status != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("health: %v %v", hr, err)
	}
	// Server streaming.
	s, err := conn.NewStream(ctx, streamDesc("Count", false, true), method("Count"))
	if err != nil {
		return err
	}
	if err := s.SendMsg(&Num{N: 100}); err != nil {
		return err
	}
	s.CloseSend()
	for want := int64(1); ; want++ {
		var n Num
		err := s.RecvMsg(&n)
		if errors.Is(err, io.EOF) && want == 101 {
			break
		}
		if err != nil || n.N != want {
			return fmt.Errorf("count: got %d (%v), want %d", n.N, err, want)
		}
	}
	// Client streaming.
	s, err = conn.NewStream(ctx, streamDesc("Sum", true, false), method("Sum"))
	if err != nil {
		return err
	}
	for i := int64(1); i <= 1000; i++ {
		if err := s.SendMsg(&Num{N: i}); err != nil {
			return err
		}
	}
	s.CloseSend()
	var sum Num
	if err := s.RecvMsg(&sum); err != nil || sum.N != 500500 {
		return fmt.Errorf("sum: %d, %v", sum.N, err)
	}
	// Bidirectional.
	s, err = conn.NewStream(ctx, streamDesc("Chat", true, true), method("Chat"))
	if err != nil {
		return err
	}
	for i := range 50 {
		text := fmt.Sprint("message ", i)
		if err := s.SendMsg(&Msg{Text: text}); err != nil {
			return err
		}
		var m Msg
		if err := s.RecvMsg(&m); err != nil || m.Text != "re: "+text {
			return fmt.Errorf("chat: %q, %v", m.Text, err)
		}
	}
	s.CloseSend()
	if err := s.RecvMsg(&Msg{}); !errors.Is(err, io.EOF) {
		return fmt.Errorf("chat end: %v", err)
	}
	return nil
}

// unary makes cfg.Calls echo calls, cfg.Concurrency at a time.
func unary(ctx context.Context, conn *grpc.ClientConn, cfg config) (result, error) {
	lat := make([]time.Duration, cfg.Calls)
	var next atomic.Int64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	start := time.Now()
	for range cfg.Concurrency {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= cfg.Calls {
					return
				}
				text := fmt.Sprint("call ", i)
				t0 := time.Now()
				var out Msg
				err := conn.Invoke(ctx, method("Echo"), &Msg{Text: text}, &out)
				lat[i] = time.Since(t0)
				if err == nil && out.Text != text {
					err = fmt.Errorf("echo %q answered %q", text, out.Text)
				}
				if err != nil {
					once.Do(func() { firstErr = err })
					return
				}
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return result{}, firstErr
	}
	elapsed := time.Since(start)
	slices.Sort(lat)
	return result{Calls: cfg.Calls, PerSecond: float64(cfg.Calls) / elapsed.Seconds(), P50: lat[len(lat)/2], P99: lat[len(lat)*99/100]}, nil
}
