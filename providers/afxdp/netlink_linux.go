package afxdp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// rtnl is a route netlink socket, opened in the device's network namespace
// and kept for the provider's life, so that later questions (routes,
// neighbours) are asked of the right namespace whatever thread asks them.
type rtnl struct {
	mu  sync.Mutex
	fd  int
	seq uint32
	buf []byte
}

func openRTNL() (*rtnl, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("afxdp: netlink: %w", err)
	}
	// A kernel that never answers must not hang a sender forever.
	tv := unix.NsecToTimeval(int64(2 * time.Second))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("afxdp: netlink: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("afxdp: netlink: %w", err)
	}
	return &rtnl{fd: fd, buf: make([]byte, 1<<16)}, nil
}

func (n *rtnl) close() { unix.Close(n.fd) }

// linkWatch is a non-blocking netlink socket that hears of link changes
// (RTMGRP_LINK). An AF_XDP socket whose interface is deleted reports
// nothing to poll, so this is how a provider learns that it is gone.
type linkWatch struct {
	fd  int
	buf []byte
}

func openLinkWatch() (*linkWatch, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("afxdp: netlink: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: unix.RTMGRP_LINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("afxdp: netlink: %w", err)
	}
	return &linkWatch{fd: fd, buf: make([]byte, 1<<16)}, nil
}

// deleted reads what the kernel has announced and reports whether ifindex
// was deleted among it.
func (w *linkWatch) deleted(ifindex int) bool {
	gone := false
	for {
		n, _, err := unix.Recvfrom(w.fd, w.buf, unix.MSG_DONTWAIT)
		if err != nil || n <= 0 {
			return gone // EAGAIN: read all; ENOBUFS: overrun, the next read goes on
		}
		msgs, err := syscall.ParseNetlinkMessage(w.buf[:n])
		if err != nil {
			continue
		}
		for _, m := range msgs {
			if m.Header.Type == unix.RTM_DELLINK && len(m.Data) >= unix.SizeofIfInfomsg &&
				int(int32(binary.NativeEndian.Uint32(m.Data[4:]))) == ifindex {
				gone = true
			}
		}
	}
}

func (w *linkWatch) close() { unix.Close(w.fd) }

// do sends one request and returns the payloads of the answers: one
// message, or none for a request that asked only for an acknowledgement.
func (n *rtnl) do(typ, flags uint16, body []byte) ([][]byte, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.seq++
	msg := make([]byte, unix.NLMSG_HDRLEN, unix.NLMSG_HDRLEN+len(body))
	msg = append(msg, body...)
	binary.NativeEndian.PutUint32(msg[0:], uint32(len(msg)))
	binary.NativeEndian.PutUint16(msg[4:], typ)
	binary.NativeEndian.PutUint16(msg[6:], flags|unix.NLM_F_REQUEST)
	binary.NativeEndian.PutUint32(msg[8:], n.seq)
	if err := unix.Sendto(n.fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, err
	}
	var out [][]byte
	for {
		got, _, err := unix.Recvfrom(n.fd, n.buf, 0)
		if err != nil {
			return nil, err
		}
		msgs, err := syscall.ParseNetlinkMessage(n.buf[:got])
		if err != nil {
			return nil, err
		}
		for _, m := range msgs {
			if m.Header.Seq != n.seq {
				continue // an answer to an earlier request that timed out
			}
			switch m.Header.Type {
			case unix.NLMSG_ERROR:
				if len(m.Data) < 4 {
					return nil, errors.New("afxdp: short netlink error")
				}
				if e := -int32(binary.NativeEndian.Uint32(m.Data)); e != 0 {
					return nil, unix.Errno(e)
				}
				return out, nil
			case unix.NLMSG_DONE:
				return out, nil
			}
			out = append(out, append([]byte(nil), m.Data...))
			if flags&unix.NLM_F_ACK == 0 {
				return out, nil
			}
		}
	}
}

// attrs calls fn with each route attribute in b.
func attrs(b []byte, fn func(typ uint16, data []byte)) {
	for len(b) >= unix.SizeofRtAttr {
		l := int(binary.NativeEndian.Uint16(b))
		if l < unix.SizeofRtAttr || l > len(b) {
			return
		}
		fn(binary.NativeEndian.Uint16(b[2:])&^unix.NLA_F_NESTED, b[unix.SizeofRtAttr:l])
		b = b[min(len(b), (l+unix.RTA_ALIGNTO-1)&^(unix.RTA_ALIGNTO-1)):]
	}
}

func appendAttr(b []byte, typ uint16, data []byte) []byte {
	l := unix.SizeofRtAttr + len(data)
	b = binary.NativeEndian.AppendUint16(b, uint16(l))
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = append(b, data...)
	for len(b)%unix.RTA_ALIGNTO != 0 {
		b = append(b, 0)
	}
	return b
}

func u32(v uint32) []byte { return binary.NativeEndian.AppendUint32(nil, v) }

// xdpState is the XDP program the kernel reports on an interface.
type xdpState struct {
	mode   uint8 // XDP_ATTACHED_*: 0 none, 1 driver, 2 generic, 3 offload, 4 several
	progID uint32
}

const (
	xdpAttachedNone    = 0
	xdpAttachedDriver  = 1
	xdpAttachedGeneric = 2
)

// link reads an interface's receive queue count and XDP state.
func (n *rtnl) link(ifindex int) (rxQueues int, xdp xdpState, err error) {
	body := make([]byte, unix.SizeofIfInfomsg)
	binary.NativeEndian.PutUint32(body[4:], uint32(ifindex))
	msgs, err := n.do(unix.RTM_GETLINK, 0, body)
	if err != nil || len(msgs) == 0 || len(msgs[0]) < unix.SizeofIfInfomsg {
		return 0, xdp, fmt.Errorf("afxdp: reading interface %d: %v", ifindex, err)
	}
	attrs(msgs[0][unix.SizeofIfInfomsg:], func(typ uint16, data []byte) {
		switch typ {
		case unix.IFLA_NUM_RX_QUEUES:
			if len(data) >= 4 {
				rxQueues = int(binary.NativeEndian.Uint32(data))
			}
		case unix.IFLA_XDP:
			attrs(data, func(typ uint16, data []byte) {
				switch {
				case typ == unix.IFLA_XDP_ATTACHED && len(data) >= 1:
					xdp.mode = data[0]
				case typ == unix.IFLA_XDP_PROG_ID && len(data) >= 4:
					xdp.progID = binary.NativeEndian.Uint32(data)
				case (typ == unix.IFLA_XDP_DRV_PROG_ID || typ == unix.IFLA_XDP_SKB_PROG_ID) && len(data) >= 4 && xdp.progID == 0:
					xdp.progID = binary.NativeEndian.Uint32(data)
				}
			})
		}
	})
	return rxQueues, xdp, nil
}

// setXDP attaches program fd to an interface through netlink, the way
// older tools do, or detaches with fd -1. flags picks the mode.
func (n *rtnl) setXDP(ifindex int, fd int32, flags uint32) error {
	body := make([]byte, unix.SizeofIfInfomsg)
	binary.NativeEndian.PutUint32(body[4:], uint32(ifindex))
	var nested []byte
	nested = appendAttr(nested, unix.IFLA_XDP_FD, u32(uint32(fd)))
	nested = appendAttr(nested, unix.IFLA_XDP_FLAGS, u32(flags))
	body = appendAttr(body, unix.IFLA_XDP|unix.NLA_F_NESTED, nested)
	_, err := n.do(unix.RTM_SETLINK, unix.NLM_F_ACK, body)
	return err
}

// route finds the next hop toward dst and the interface it leaves by.
func (n *rtnl) route(dst netip.Addr) (nextHop netip.Addr, oif int, err error) {
	body := make([]byte, unix.SizeofRtMsg)
	body[0] = family(dst)
	body[1] = uint8(dst.BitLen())
	body = appendAttr(body, unix.RTA_DST, dst.AsSlice())
	msgs, err := n.do(unix.RTM_GETROUTE, 0, body)
	if err != nil || len(msgs) == 0 || len(msgs[0]) < unix.SizeofRtMsg {
		return nextHop, 0, fmt.Errorf("no route to %v: %v", dst, err)
	}
	nextHop = dst
	attrs(msgs[0][unix.SizeofRtMsg:], func(typ uint16, data []byte) {
		switch typ {
		case unix.RTA_GATEWAY:
			if a, ok := netip.AddrFromSlice(data); ok {
				nextHop = a
			}
		case unix.RTA_OIF:
			if len(data) >= 4 {
				oif = int(binary.NativeEndian.Uint32(data))
			}
		}
	})
	return nextHop, oif, nil
}

// Neighbour states that carry a usable link-layer address.
const nudValid = unix.NUD_PERMANENT | unix.NUD_NOARP | unix.NUD_REACHABLE | unix.NUD_STALE | unix.NUD_DELAY | unix.NUD_PROBE

// neighbour looks ip up in the interface's neighbour table.
func (n *rtnl) neighbour(ifindex int, ip netip.Addr) (mac [6]byte, ok bool, err error) {
	body := ndmsg(ifindex, ip, 0, 0)
	msgs, err := n.do(unix.RTM_GETNEIGH, 0, body)
	if errors.Is(err, unix.ENOENT) {
		return mac, false, nil
	}
	if err != nil || len(msgs) == 0 || len(msgs[0]) < unix.SizeofNdMsg {
		return mac, false, err
	}
	state := binary.NativeEndian.Uint16(msgs[0][8:])
	attrs(msgs[0][unix.SizeofNdMsg:], func(typ uint16, data []byte) {
		if typ == unix.NDA_LLADDR && len(data) == 6 {
			copy(mac[:], data)
			ok = state&nudValid != 0
		}
	})
	return mac, ok, nil
}

// resolve asks the kernel to resolve ip (ARP or neighbour solicitation)
// without sending it anything: a neighbour entry marked NTF_USE.
func (n *rtnl) resolve(ifindex int, ip netip.Addr) error {
	_, err := n.do(unix.RTM_NEWNEIGH, unix.NLM_F_ACK|unix.NLM_F_CREATE, ndmsg(ifindex, ip, 0, unix.NTF_USE))
	return err
}

func ndmsg(ifindex int, ip netip.Addr, state uint16, flags uint8) []byte {
	b := make([]byte, unix.SizeofNdMsg)
	b[0] = family(ip)
	binary.NativeEndian.PutUint32(b[4:], uint32(ifindex))
	binary.NativeEndian.PutUint16(b[8:], state)
	b[10] = flags
	return appendAttr(b, unix.NDA_DST, ip.AsSlice())
}

func family(a netip.Addr) uint8 {
	if a.Is4() {
		return unix.AF_INET
	}
	return unix.AF_INET6
}
