package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"net"
	"time"

	"github.com/quic-go/quic-go"
)

// transport connects a client to a server in this process, on loopback.
type transport interface {
	name() string
	// start listens, serves one stream with serve in a goroutine, and
	// returns the client's end of it. finish closes both ends and returns
	// the server's error.
	start(serve func(io.ReadWriter) error) (client io.ReadWriter, finish func() error, err error)
}

// setupTimeout bounds connecting, so that a broken loopback fails the
// run instead of hanging it.
const setupTimeout = 10 * time.Second

type tcpTransport struct{}

func (tcpTransport) name() string { return "tcp" }

func (tcpTransport) start(serve func(io.ReadWriter) error) (io.ReadWriter, func() error, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	served := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			served <- err
			return
		}
		defer c.Close()
		served <- serve(c)
	}()
	c, err := net.DialTimeout("tcp", ln.Addr().String(), setupTimeout)
	if err != nil {
		ln.Close()
		<-served
		return nil, nil, err
	}
	finish := func() error {
		c.Close()
		err := <-served
		ln.Close()
		return err
	}
	return c, finish, nil
}

type quicTransport struct{}

func (quicTransport) name() string { return "quic" }

// alpn names the protocol the two ends speak, as TLS in QUIC requires.
const alpn = "vroce-perf"

func (quicTransport) start(serve func(io.ReadWriter) error) (io.ReadWriter, func() error, error) {
	serverTLS, clientTLS, err := loopbackTLS()
	if err != nil {
		return nil, nil, err
	}
	// Each end gets a Transport of its own on a socket of its own, which
	// finish closes: quic-go's ListenAddr and DialAddr keep theirs running
	// until a closed connection's IDs expire, after the run has ended.
	server, err := newQUICTransport()
	if err != nil {
		return nil, nil, err
	}
	client, err := newQUICTransport()
	if err != nil {
		closeQUICTransport(server)
		return nil, nil, err
	}
	closeTransports := func() {
		closeQUICTransport(client)
		closeQUICTransport(server)
	}
	ln, err := server.Listen(serverTLS, nil)
	if err != nil {
		closeTransports()
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		// A stream reaches the server with its first bytes: accept it here,
		// once the client is writing.
		c, err := ln.Accept(ctx)
		if err != nil {
			served <- err
			return
		}
		defer c.CloseWithError(0, "")
		s, err := c.AcceptStream(ctx)
		if err != nil {
			served <- err
			return
		}
		err = serve(s)
		<-ctx.Done() // the client has what it needs once finish runs
		served <- err
	}()
	fail := func(err error) (io.ReadWriter, func() error, error) {
		cancel()
		<-served
		ln.Close()
		closeTransports()
		return nil, nil, err
	}
	dctx, dcancel := context.WithTimeout(ctx, setupTimeout)
	defer dcancel()
	c, err := client.Dial(dctx, server.Conn.LocalAddr(), clientTLS, nil)
	if err != nil {
		return fail(err)
	}
	s, err := c.OpenStreamSync(dctx)
	if err != nil {
		c.CloseWithError(0, "")
		return fail(err)
	}
	finish := func() error {
		// Closing the client's connection first ends a server still
		// blocked in a read, as after a client that gave up mid-run.
		c.CloseWithError(0, "")
		cancel()
		err := <-served
		ln.Close()
		closeTransports()
		if errors.Is(err, context.Canceled) {
			err = errors.New("the server never saw the stream")
		}
		return err
	}
	return s, finish, nil
}

// newQUICTransport opens a quic-go Transport on a loopback socket.
func newQUICTransport() (*quic.Transport, error) {
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, err
	}
	return &quic.Transport{Conn: conn}, nil
}

// closeQUICTransport stops t's receive loop, waiting for it, then closes
// the socket it was given.
func closeQUICTransport(t *quic.Transport) {
	t.Close()
	t.Conn.Close()
}

// loopbackTLS makes a self-signed certificate for 127.0.0.1 and the two
// configurations that use and trust it.
func loopbackTLS() (server, client *tls.Config, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "quic-perf"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	roots := x509.NewCertPool()
	roots.AddCert(cert)
	server = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, NextProtos: []string{alpn}}
	client = &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", NextProtos: []string{alpn}}
	return server, client, nil
}
