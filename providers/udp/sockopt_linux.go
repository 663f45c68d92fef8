package udp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"

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
			// rdma_rxe sends UDP checksum 0 on IPv6 too, which Linux
			// drops unless asked not to; the ICRC covers the datagram.
			_ = unix.SetsockoptInt(s, unix.SOL_UDP, unix.UDP_NO_CHECK6_RX, 1)
		} else {
			serr = unix.SetsockoptInt(s, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO)
		}
		if unix.SetsockoptInt(s, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, socketBuf) != nil {
			_ = unix.SetsockoptInt(s, unix.SOL_SOCKET, unix.SO_RCVBUF, socketBuf)
		}
		if unix.SetsockoptInt(s, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, socketBuf) != nil {
			_ = unix.SetsockoptInt(s, unix.SOL_SOCKET, unix.SO_SNDBUF, socketBuf)
		}
		// UDP GRO: the kernel may hand us a run of datagrams as one, with
		// their size; on loopback a GSO send then crosses unsegmented.
		p.gro = unix.SetsockoptInt(s, unix.SOL_UDP, unix.UDP_GRO, 1) == nil
	})
	if err == nil && serr != nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("udp: set DF on the socket: %w", err)
	}
	return nil
}

// gsoControl is the control message that makes one sendmsg carry
// several datagrams of segment bytes each (UDP_SEGMENT), cut by the
// kernel or the NIC: one system call instead of one per packet.
func gsoControl(b []byte, segment int) []byte {
	b = b[:unix.CmsgSpace(2)]
	clear(b)
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
	h.Level, h.Type = unix.SOL_UDP, unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	binary.NativeEndian.PutUint16(b[unix.CmsgLen(0):], uint16(segment))
	return b
}

// gsoSupported: the kernel takes UDP_SEGMENT (Linux 4.18 and later).
const gsoSupported = true

// gsoRefused reports whether a send error says the kernel or device will
// not segment (no checksum offload on the route, say): fall back.
func gsoRefused(err error) bool {
	return errors.Is(err, unix.EIO) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOPROTOOPT) || errors.Is(err, unix.EOPNOTSUPP)
}

// groSegment reads the segment size from a received message's control
// data: 0 when the datagram was not coalesced. It walks the headers by
// hand: unix.ParseSocketControlMessage allocates.
func groSegment(oob []byte) int {
	for len(oob) >= unix.SizeofCmsghdr {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
		n := int(h.Len)
		if n < unix.SizeofCmsghdr || n > len(oob) {
			return 0
		}
		data := oob[unix.CmsgLen(0):n]
		if h.Level == unix.SOL_UDP && h.Type == unix.UDP_GRO {
			switch {
			case len(data) >= 4:
				return int(binary.NativeEndian.Uint32(data))
			case len(data) >= 2:
				return int(binary.NativeEndian.Uint16(data))
			}
			return 0
		}
		next := unix.CmsgSpace(n - unix.CmsgLen(0))
		if next > len(oob) {
			return 0
		}
		oob = oob[next:]
	}
	return 0
}
