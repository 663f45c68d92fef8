package streamtest

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// ServeEcho accepts one connection on ln and sends back what arrives
// until the peer half-closes, then closes it.
func ServeEcho(ln net.Listener) error {
	c, err := ln.Accept()
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = io.Copy(c, c)
	return err
}

// Echoed sends n patterned bytes through c to a peer that echoes them,
// half-closes, and checks that the same bytes come back, within 30 s.
func Echoed(c net.Conn, n int) error {
	want := make([]byte, n)
	for i := range want {
		want[i] = byte(i*7 + i>>8)
	}
	go func() {
		c.Write(want)
		c.(interface{ CloseWrite() error }).CloseWrite()
	}()
	if err := c.SetDeadline(time.Now().Add(30 * time.Second)); err != nil {
		return err
	}
	got, err := io.ReadAll(c)
	if err != nil {
		return fmt.Errorf("echo: %d of %d bytes: %w", len(got), n, err)
	}
	if !bytes.Equal(got, want) {
		return fmt.Errorf("the echo differs (%d of %d bytes)", len(got), n)
	}
	return nil
}

// SyncBuffer is a bytes.Buffer safe to write from one goroutine (a
// command's output, a logger) while another reads it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
