//go:build linux

package plugin

import (
	"bytes"
	"crypto/tls"
	"errors"
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// handshakeOver runs a TLS handshake between a host (client) and a plugin
// (server) config over a pipe and returns each end's error.
func handshakeOver(host, plugin *tls.Config) (hostErr, pluginErr error) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	srv := tls.Server(a, plugin)
	done := make(chan error, 1)
	go func() {
		err := srv.Handshake()
		if err == nil {
			// TLS 1.3 checks the client's certificate after the client's
			// handshake returns: read until it says which.
			_, err = srv.Read(make([]byte, 1))
		}
		a.Close()
		done <- err
	}()
	cli := tls.Client(b, host)
	hostErr = cli.Handshake()
	if hostErr == nil {
		_, hostErr = cli.Write([]byte{1})
	}
	b.Close()
	return hostErr, <-done
}

// launchConfigs is one launch's TLS configs: the host's, and the
// plugin's as it makes it from the credentials message.
func launchConfigs(t *testing.T) (host, plugin *tls.Config) {
	host, msg, err := newCredentials()
	require.NoError(t, err)
	creds, err := parseCredentials(msg)
	require.NoError(t, err)
	plugin, err = creds.config()
	require.NoError(t, err)
	return host, plugin
}

// The host's config and the plugin's, made from one launch's
// credentials message, complete a mutual handshake; each refuses the
// other end of another launch.
func TestCredentials(t *testing.T) {
	hostCfg, pluginCfg := launchConfigs(t)
	hostErr, pluginErr := handshakeOver(hostCfg, pluginCfg)
	require.NoError(t, hostErr, "the launch's own host")
	require.NoError(t, pluginErr, "the launch's own plugin")

	otherHost, otherPlugin := launchConfigs(t)

	_, pluginErr = handshakeOver(otherHost, pluginCfg)
	assert.Error(t, pluginErr, "the plugin accepted another launch's host")
	hostErr, _ = handshakeOver(hostCfg, otherPlugin)
	assert.Error(t, hostErr, "the host accepted another launch's plugin")
}

func TestCredentialsRefused(t *testing.T) {
	_, msg, err := newCredentials()
	require.NoError(t, err)
	for name, b := range map[string][]byte{
		"empty":           nil,
		"another version": append([]byte{credentialsVersion + 1}, msg[1:]...),
		"cut short":       msg[:len(msg)-1],
		"trailing bytes":  append(append([]byte{}, msg...), 0),
	} {
		_, err := parseCredentials(b)
		assert.ErrorIs(t, err, errCredentials, name)
	}
	c, err := parseCredentials(msg)
	require.NoError(t, err)
	c.pluginKey = c.pluginKey[:len(c.pluginKey)-1]
	_, err = c.config()
	assert.ErrorIs(t, err, errCredentials, "a damaged key")
}

// The credentials message comes from the host over the descriptor
// socket: whatever it holds, a typed error or its parts, never a panic.
// (What config does with the parts is the standard library's x509 and
// ed25519, fuzzed there, and under instrumentation too slow to fuzz
// here: TestCredentialsRefused covers its refusals.)
func FuzzParseCredentials(f *testing.F) {
	_, msg, err := newCredentials()
	require.NoError(f, err)
	f.Add(msg)
	f.Add([]byte{credentialsVersion, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{credentialsVersion, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := parseCredentials(b)
		if err != nil {
			if !errors.Is(err, errCredentials) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if got := c.marshal(); !bytes.Equal(got, b) {
			t.Fatalf("parsed %x, which makes %x", b, got)
		}
	})
}
