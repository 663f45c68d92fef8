package udp

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// configure sets DF (so IPv4 IDs are zero and nothing fragments) and large
// socket buffers: SO_RCVBUFFORCE where we may (root or CAP_NET_ADMIN), else
// as much as net.core.rmem_max allows.
func (p *Provider) configure() error {
	rc, err := p.conn.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = rc.Control(func(fd uintptr) {
		s := int(fd)
		if p.v6 {
			serr = unix.SetsockoptInt(s, unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_DO)
			// A dual-stack socket sends IPv4 too.
			_ = unix.SetsockoptInt(s, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO)
		} else {
			serr = unix.SetsockoptInt(s, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO)
		}
		if unix.SetsockoptInt(s, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, socketBuf) != nil {
			_ = unix.SetsockoptInt(s, unix.SOL_SOCKET, unix.SO_RCVBUF, socketBuf)
		}
		if unix.SetsockoptInt(s, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, socketBuf) != nil {
			_ = unix.SetsockoptInt(s, unix.SOL_SOCKET, unix.SO_SNDBUF, socketBuf)
		}
	})
	if err == nil && serr != nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("udp: set DF on the socket: %w", err)
	}
	return nil
}
