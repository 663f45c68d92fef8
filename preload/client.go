package preload

import (
	"encoding/binary"
	"fmt"
	"net"
)

// Client is vroce-run's own connection to its daemon: while it is open
// the daemon stays up, and it asks for the counters.
type Client struct{ c *net.UnixConn }

// Dial connects to the daemon serving @name.
func Dial(name string) (*Client, error) {
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: "@" + name, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("vroced at @%s: %w", name, err)
	}
	return &Client{c: c}, nil
}

// Stats asks the daemon for its counters.
func (c *Client) Stats() (Stats, error) {
	if _, err := c.c.Write(message{op: opStats}.encode()); err != nil {
		return Stats{}, err
	}
	b := make([]byte, messageSize+statsSize+1)
	n, err := c.c.Read(b)
	if err != nil {
		return Stats{}, err
	}
	return decodeStatsReply(b[:n])
}

// decodeStatsReply reads the daemon's answer to opStats: a message
// header, then the counters.
func decodeStatsReply(b []byte) (Stats, error) {
	if len(b) != messageSize+statsSize || binary.LittleEndian.Uint32(b) != magic {
		return Stats{}, fmt.Errorf("%w: a stats reply of %d bytes", errBadMessage, len(b))
	}
	return decodeStats(b[messageSize:])
}

// Close lets the daemon go once nobody else uses it.
func (c *Client) Close() error { return c.c.Close() }
