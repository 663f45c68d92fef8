package afxdp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// progName names our XDP program in the kernel; Open recognises a copy
// left attached by an earlier run by this name.
const progName = "vroce_xdp"

// steering is the XDP side of a provider: the program, its socket map and
// the attachment.
type steering struct {
	prog    *ebpf.Program
	xsks    *ebpf.Map
	link    link.Link
	generic bool // attached in generic (skb) mode
}

// be16 is a 16-bit network-order value as the program's loads see it.
func be16(v uint16) int32 {
	return int32(binary.NativeEndian.Uint16(binary.BigEndian.AppendUint16(nil, v)))
}

// be32 is a 32-bit network-order value as the program's loads see it.
func be32(b []byte) int32 {
	return int32(binary.NativeEndian.Uint32(b))
}

// steeringProgram redirects UDP datagrams for the device's address and
// port (IPv4 or IPv6, the device's family) to the socket bound to the
// queue they arrived on, and passes everything else (ARP, neighbour
// discovery, fragments, IPv4 with options, IPv6 with extension headers,
// other ports, and other addresses on the interface, which another
// RoCE stack may use) to the kernel. A queue with no socket passes too,
// through bpf_redirect_map's default action.
func steeringProgram(xsks *ebpf.Map, local netip.AddrPort) asm.Instructions {
	const (
		ctx, data, end, p, v = asm.R6, asm.R2, asm.R3, asm.R4, asm.R5
		ip                   = ethHeader // where the IP header starts
	)
	bounds := func(n int32) asm.Instructions {
		return asm.Instructions{
			asm.Mov.Reg(p, data),
			asm.Add.Imm(p, n),
			asm.JGT.Reg(p, end, "pass"),
		}
	}
	var insns asm.Instructions
	insns = append(insns,
		asm.Mov.Reg(ctx, asm.R1),
		asm.LoadMem(data, ctx, 0, asm.Word), // xdp_md.data
		asm.LoadMem(end, ctx, 4, asm.Word),  // xdp_md.data_end
	)
	insns = append(insns, bounds(ethHeader)...)
	addr := local.Addr().AsSlice()
	// dst compares the destination address, four bytes at a time (32-bit
	// compares: a 64-bit one would sign-extend the immediate).
	dst := func(at int16) asm.Instructions {
		var out asm.Instructions
		for i := 0; i < len(addr); i += 4 {
			out = append(out,
				asm.LoadMem(v, data, at+int16(i), asm.Word),
				asm.JNE.Imm32(v, be32(addr[i:i+4]), "pass"))
		}
		return out
	}
	if local.Addr().Is4() {
		insns = append(insns,
			asm.LoadMem(v, data, 12, asm.Half),
			asm.JNE.Imm(v, be16(etherTypeIPv4), "pass"),
		)
		insns = append(insns, bounds(ethHeader+ipv4Header+udpHeader)...)
		insns = append(insns,
			asm.LoadMem(v, data, ip+0, asm.Byte),
			asm.JNE.Imm(v, 0x45, "pass"), // IPv4 without options
			asm.LoadMem(v, data, ip+9, asm.Byte),
			asm.JNE.Imm(v, protoUDP, "pass"),
			asm.LoadMem(v, data, ip+6, asm.Half),
			asm.And.Imm(v, be16(0x3fff)), // more fragments, or an offset
			asm.JNE.Imm(v, 0, "pass"),
			asm.LoadMem(v, data, ip+ipv4Header+2, asm.Half),
			asm.JNE.Imm(v, be16(local.Port()), "pass"),
		)
		insns = append(insns, dst(ip+16)...)
	} else {
		insns = append(insns,
			asm.LoadMem(v, data, 12, asm.Half),
			asm.JNE.Imm(v, be16(etherTypeIPv6), "pass"),
		)
		insns = append(insns, bounds(ethHeader+ipv6Header+udpHeader)...)
		insns = append(insns,
			asm.LoadMem(v, data, ip+6, asm.Byte),
			asm.JNE.Imm(v, protoUDP, "pass"),
			asm.LoadMem(v, data, ip+ipv6Header+2, asm.Half),
			asm.JNE.Imm(v, be16(local.Port()), "pass"),
		)
		insns = append(insns, dst(ip+24)...)
	}
	insns = append(insns,
		asm.LoadMem(asm.R2, ctx, 16, asm.Word), // xdp_md.rx_queue_index
		asm.LoadMapPtr(asm.R1, xsks.FD()),
		asm.Mov.Imm(asm.R3, 2), // XDP_PASS when the queue has no socket
		asm.FnRedirectMap.Call(),
		asm.Return(),

		asm.Mov.Imm(asm.R0, 2).WithSymbol("pass"), // XDP_PASS
		asm.Return(),
	)
	return insns
}

// attachSteering loads the program for local and attaches it to ifindex,
// in driver mode where the driver has XDP (unless generic is asked for)
// and in generic mode where not.
// A program of ours left by a run that did not detach is replaced; anyone
// else's is left alone and reported.
func attachSteering(nl *rtnl, ifindex, queues int, iface string, local netip.AddrPort, generic bool) (_ *steering, err error) {
	if err := removeStale(nl, ifindex, iface); err != nil {
		return nil, err
	}
	s := &steering{}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	s.xsks, err = ebpf.NewMap(&ebpf.MapSpec{Name: "vroce_xsks", Type: ebpf.XSKMap, KeySize: 4, ValueSize: 4, MaxEntries: uint32(queues)})
	if err != nil {
		return nil, privilegeError("creating the XDP socket map", "CAP_BPF and CAP_NET_ADMIN", err)
	}
	s.prog, err = ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         progName,
		Type:         ebpf.XDP,
		License:      "Dual MIT/GPL",
		Instructions: steeringProgram(s.xsks, local),
	})
	if err != nil {
		return nil, privilegeError("loading the XDP program", "CAP_BPF and CAP_NET_ADMIN", err)
	}
	err = unix.EOPNOTSUPP
	if !generic {
		s.link, err = link.AttachXDP(link.XDPOptions{Program: s.prog, Interface: ifindex, Flags: link.XDPDriverMode})
	}
	if err != nil {
		s.link, err = link.AttachXDP(link.XDPOptions{Program: s.prog, Interface: ifindex, Flags: link.XDPGenericMode})
		s.generic = true
	}
	if err != nil {
		return nil, privilegeError("attaching the XDP program to "+iface, "CAP_NET_ADMIN", err)
	}
	return s, nil
}

// removeStale detaches a program named ours that a netlink attachment left
// on the interface (a link-based attachment ends with its process, so only
// a netlink one can outlive a crash).
func removeStale(nl *rtnl, ifindex int, iface string) error {
	_, st, err := nl.link(ifindex)
	if err != nil || st.mode == xdpAttachedNone {
		return err
	}
	name := "?"
	if p, err := ebpf.NewProgramFromID(ebpf.ProgramID(st.progID)); err == nil {
		if info, err := p.Info(); err == nil {
			name = info.Name
		}
		p.Close()
	}
	if name != progName {
		return fmt.Errorf("afxdp: %s already runs XDP program %q (id %d); vRoCE will not replace another program: detach it (ip link set dev %s xdp off) or pick another interface", iface, name, st.progID, iface)
	}
	flags := uint32(unix.XDP_FLAGS_DRV_MODE)
	if st.mode == xdpAttachedGeneric {
		flags = unix.XDP_FLAGS_SKB_MODE
	}
	if err := nl.setXDP(ifindex, -1, flags); err != nil {
		if errors.Is(err, unix.EBUSY) || errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("afxdp: %s is in use by another vRoCE device (XDP program %d, held by a running process): an interface serves one AF_XDP device", iface, st.progID)
		}
		return fmt.Errorf("afxdp: removing a stale vRoCE XDP program from %s: %w", iface, err)
	}
	return nil
}

// register puts a queue's socket in the map the program redirects through.
func (s *steering) register(queue, fd int) error {
	return s.xsks.Put(uint32(queue), uint32(fd))
}

func (s *steering) close() {
	if s.link != nil {
		s.link.Close()
	}
	if s.prog != nil {
		s.prog.Close()
	}
	if s.xsks != nil {
		s.xsks.Close()
	}
}
