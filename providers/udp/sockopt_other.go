//go:build !linux

package udp

// configure is best effort off Linux: the ICRC rebuilt from addresses
// assumes IPv4 ID 0, which other kernels may not send; IPv6 is unaffected.
func (p *Provider) configure() error {
	_ = p.conn.SetReadBuffer(socketBuf)
	_ = p.conn.SetWriteBuffer(socketBuf)
	return nil
}

func gsoControl(b []byte, segment int) []byte { return nil }

const gsoSupported = false

func gsoRefused(error) bool { return true }

func groSegment([]byte) int { return 0 }
