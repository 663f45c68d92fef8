//go:build linux

package plugin

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"errors"
	"fmt"
	"math/big"
	"net"
	"time"
)

// Mutual TLS for the control connection, made fresh at every launch.
//
// go-plugin's AutoMTLS does the same job with P-521 certificates: making
// two and the handshake between them took 30-35 ms of a launch here,
// more than the 25 ms a launch and first open may take. Ed25519 does it
// in about 3 ms. The host makes both certificates: its own, kept, and
// the plugin's, which reaches the plugin (key included) as the first
// message on the descriptor socket. That socket is private to the two
// processes, where AutoMTLS's environment variable can be read by any
// process of the user; each end then trusts only the other's
// certificate, as with AutoMTLS. go-plugin carries the rest: the host's
// config as ClientConfig.TLSConfig, the plugin's from
// ServeConfig.TLSProvider.

// credentialsVersion leads the credentials message; a plugin refuses
// any other.
const credentialsVersion = 1

// errCredentials is wrapped by every error of a malformed credentials
// message.
var errCredentials = errors.New("vroce plugin: bad credentials message")

// credentials is what the plugin is given: its certificate and key, and
// the host's certificate, the only one it accepts.
type credentials struct {
	// The certificates are DER; the key is its Ed25519 seed, of a fixed
	// size, where a PKCS #8 key could be any algorithm's (an RSA key's
	// checks are slow on a crafted one).
	pluginCert, pluginKey, hostCert []byte
}

// newCredentials makes a launch's certificates: the host's TLS config
// and the message that gives the plugin its own.
func newCredentials() (*tls.Config, []byte, error) {
	host, hostKey, err := selfSigned()
	if err != nil {
		return nil, nil, err
	}
	plug, plugKey, err := selfSigned()
	if err != nil {
		return nil, nil, err
	}
	cfg, err := peerConfig(host, hostKey, plug)
	if err != nil {
		return nil, nil, err
	}
	cfg.ServerName = "localhost"
	return cfg, credentials{pluginCert: plug, pluginKey: plugKey.Seed(), hostCert: host}.marshal(), nil
}

// selfSigned makes a certificate for localhost, signed by its own key.
func selfSigned() ([]byte, ed25519.PrivateKey, error) {
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, nil, err
	}
	tpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "localhost", Organization: []string{"vroce.dev plugin"}},
		DNSNames:              []string{"localhost"},
		SerialNumber:          serial,
		NotBefore:             time.Now().Add(-time.Minute),
		NotAfter:              time.Now().AddDate(10, 0, 0), // lives with the launch, not the calendar
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, pub, key)
	return der, key, err
}

// peerConfig is one end's TLS config: its certificate, and the other's
// as the only one it trusts, for either role.
func peerConfig(cert []byte, key ed25519.PrivateKey, peer []byte) (*tls.Config, error) {
	pc, err := x509.ParseCertificate(peer)
	if err != nil {
		return nil, fmt.Errorf("%w: the peer's certificate: %v", errCredentials, err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(pc)
	return &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{cert}, PrivateKey: key}},
		RootCAs:      pool,
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS13,
	}, nil
}

// The credentials message: the version byte, then each of pluginCert,
// pluginKey and hostCert as a 16-bit big-endian length and its bytes.
func (c credentials) marshal() []byte {
	b := []byte{credentialsVersion}
	for _, part := range [][]byte{c.pluginCert, c.pluginKey, c.hostCert} {
		b = binary.BigEndian.AppendUint16(b, uint16(len(part)))
		b = append(b, part...)
	}
	return b
}

// parseCredentials decodes a credentials message, refusing one of
// another version, cut short or with bytes after its end.
func parseCredentials(b []byte) (credentials, error) {
	if len(b) == 0 || b[0] != credentialsVersion {
		v := -1
		if len(b) > 0 {
			v = int(b[0])
		}
		return credentials{}, fmt.Errorf("%w: version %d, this plugin reads %d", errCredentials, v, credentialsVersion)
	}
	b = b[1:]
	var parts [3][]byte
	for i := range parts {
		if len(b) < 2 || len(b)-2 < int(binary.BigEndian.Uint16(b)) {
			return credentials{}, fmt.Errorf("%w: cut short", errCredentials)
		}
		n := int(binary.BigEndian.Uint16(b))
		parts[i], b = b[2:2+n], b[2+n:]
	}
	if len(b) != 0 {
		return credentials{}, fmt.Errorf("%w: %d bytes after its end", errCredentials, len(b))
	}
	return credentials{pluginCert: parts[0], pluginKey: parts[1], hostCert: parts[2]}, nil
}

// readCredentials takes the plugin's credentials, the first message on
// the descriptor socket, and makes its TLS config.
func readCredentials(c *net.UnixConn) (*tls.Config, error) {
	if err := c.SetReadDeadline(time.Now().Add(controlTimeout)); err != nil {
		return nil, err
	}
	b := make([]byte, 4096)
	n, err := c.Read(b)
	if err != nil {
		return nil, fmt.Errorf("no credentials from the host on the descriptor socket: %w", err)
	}
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		return nil, err
	}
	creds, err := parseCredentials(b[:n])
	if err != nil {
		return nil, err
	}
	return creds.config()
}

// config is the plugin's TLS config from its credentials.
func (c credentials) config() (*tls.Config, error) {
	if len(c.pluginKey) != ed25519.SeedSize {
		return nil, fmt.Errorf("%w: a key of %d bytes, not an Ed25519 seed", errCredentials, len(c.pluginKey))
	}
	key := ed25519.NewKeyFromSeed(c.pluginKey)
	cert, err := x509.ParseCertificate(c.pluginCert)
	if err != nil {
		return nil, fmt.Errorf("%w: the plugin's certificate: %v", errCredentials, err)
	}
	if pub, ok := cert.PublicKey.(ed25519.PublicKey); !ok || !pub.Equal(key.Public()) {
		return nil, fmt.Errorf("%w: the plugin's certificate is not for its key", errCredentials)
	}
	return peerConfig(c.pluginCert, key, c.hostCert)
}
