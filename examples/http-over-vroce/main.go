package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	_ "vroce.dev/providers/udp" // the packet provider this program links
	"vroce.dev/rsock"
)

// config is one run.
type config struct {
	Requests    int
	Concurrency int
	BodySize    int
	Mode        string // rsock mode: socket or cm
}

// result is one protocol over one transport.
type result struct {
	Transport       string // what carried the connections, as they report it
	ServerTransport string
	Proto           string // HTTP/1.1 or HTTP/2.0
	Requests        int
	PerSecond       float64
	P50, P99        time.Duration
}

func main() {
	var cfg config
	flag.IntVar(&cfg.Requests, "requests", 2000, "requests per protocol and transport")
	flag.IntVar(&cfg.Concurrency, "concurrency", 8, "requests in flight")
	flag.IntVar(&cfg.BodySize, "body", 1024, "response body bytes")
	flag.StringVar(&cfg.Mode, "mode", "", "rsock connection mode: socket or cm (default $RSOCK_MODE, then socket)")
	flag.Parse()
	results, err := run(context.Background(), cfg)
	for _, r := range results {
		fmt.Println(r)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "http-over-vroce:", err)
		os.Exit(1)
	}
	for _, r := range results {
		if r.Transport == "vroce" {
			v, t := r, results[slices.IndexFunc(results, func(x result) bool { return x.Proto == r.Proto && x.Transport == "tcp" })]
			fmt.Printf("proved: an unmodified net/http server and client spoke %s over vRoCE (both ends report transport %q), %d responses checked; %.2fx TCP's requests/s, p50 %.1fx TCP's\n",
				v.Proto, v.ServerTransport, v.Requests, v.PerSecond/t.PerSecond, float64(v.P50)/float64(t.P50))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rsock.Drain(ctx)
}

func (r result) String() string {
	return fmt.Sprintf("%-8s over %-5s (server side: %-5s) %6d requests  %8.0f req/s  p50 %7.1f us  p99 %7.1f us",
		r.Proto, r.Transport, r.ServerTransport, r.Requests, r.PerSecond, us(r.P50), us(r.P99))
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// run serves and fetches over vRoCE, then over TCP, for both protocols.
func run(ctx context.Context, cfg config) ([]result, error) {
	var results []result
	for _, h2 := range []bool{false, true} {
		for _, overVRoCE := range []bool{true, false} {
			r, err := measure(ctx, cfg, overVRoCE, h2)
			if err != nil {
				return results, err
			}
			results = append(results, r)
		}
	}
	return results, nil
}

// transportOf reports what carries a connection.
func transportOf(c net.Conn) string {
	if t, ok := c.(interface{ Transport() string }); ok {
		return t.Transport()
	}
	return "tcp"
}

type connKey struct{}

// measure runs one protocol over one transport: a server, a client, and
// the requests.
func measure(ctx context.Context, cfg config, overVRoCE, h2 bool) (result, error) {
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
	body := make([]byte, cfg.BodySize)
	for i := range body {
		body[i] = byte('a' + i%26)
	}
	sum := sha256.Sum256(body)
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	var serverSide atomic.Value
	srv := &http.Server{
		Protocols: &protocols,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, c)
		},
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			serverSide.Store(transportOf(r.Context().Value(connKey{}).(net.Conn)))
			w.Header().Set("X-Body-Sha256", hex.EncodeToString(sum[:]))
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
			w.Write(body)
		}),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	var clientSide atomic.Value
	dial := (&net.Dialer{}).DialContext
	if overVRoCE {
		d := &rsock.Dialer{Mode: cfg.Mode, NoFallback: true}
		dial = d.DialContext
	}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dial(ctx, network, addr)
			if err == nil {
				clientSide.Store(transportOf(c))
			}
			return c, err
		},
		MaxIdleConnsPerHost: cfg.Concurrency,
		Protocols:           new(http.Protocols),
	}
	if h2 {
		tr.Protocols.SetUnencryptedHTTP2(true)
	} else {
		tr.Protocols.SetHTTP1(true)
	}
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	url := "http://" + ln.Addr().String() + "/"

	lat := make([]time.Duration, cfg.Requests)
	var next atomic.Int64
	var proto atomic.Value
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	start := time.Now()
	for range cfg.Concurrency {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= cfg.Requests {
					return
				}
				t0 := time.Now()
				err := fetch(ctx, client, url, sum[:], &proto)
				lat[i] = time.Since(t0)
				if err != nil {
					once.Do(func() { firstErr = err })
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	tr.CloseIdleConnections()
	shutdownCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	srv.Shutdown(shutdownCtx)
	cancel()
	<-served
	if firstErr != nil {
		return result{}, firstErr
	}
	slices.Sort(lat)
	r := result{Requests: cfg.Requests, PerSecond: float64(cfg.Requests) / elapsed.Seconds(),
		P50: lat[len(lat)/2], P99: lat[len(lat)*99/100]}
	r.Transport, _ = clientSide.Load().(string)
	r.ServerTransport, _ = serverSide.Load().(string)
	r.Proto, _ = proto.Load().(string)
	return r, nil
}

// fetch gets url and checks the body against its checksum.
func fetch(ctx context.Context, c *http.Client, url string, sum []byte, proto *atomic.Value) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	h := sha256.New()
	if _, err := io.Copy(h, resp.Body); err != nil {
		return err
	}
	if hex.EncodeToString(h.Sum(nil)) != resp.Header.Get("X-Body-Sha256") || !slices.Equal(h.Sum(nil), sum) {
		return errors.New("the response body differs from what the server sent")
	}
	proto.Store(resp.Proto)
	return nil
}
