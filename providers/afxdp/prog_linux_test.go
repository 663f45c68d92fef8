package afxdp

import (
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"

	"vroce.dev/internal/testkit/netnstest"
)

// attachByNetlink attaches a program the old way, through netlink, as a
// program that outlives its process, and returns the interface's state.
func attachByNetlink(t *testing.T, nl *rtnl, ifindex int, name string, insns func(*ebpf.Map) asm.Instructions) {
	t.Helper()
	xsks, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.XSKMap, KeySize: 4, ValueSize: 4, MaxEntries: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer xsks.Close()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: name, Type: ebpf.XDP, License: "Dual MIT/GPL", Instructions: insns(xsks)})
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	if err := nl.setXDP(ifindex, int32(prog.FD()), unix.XDP_FLAGS_SKB_MODE); err != nil {
		t.Fatal(err)
	}
}

// interfaceAndNetlink looks up an interface and opens a netlink socket,
// both in the calling thread's namespace; the socket closes with the test.
func interfaceAndNetlink(t *testing.T, name string) (*net.Interface, *rtnl) {
	t.Helper()
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		t.Fatal(err)
	}
	nl, err := openRTNL()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nl.close)
	return ifi, nl
}

func xdpMode(t *testing.T, nl *rtnl, ifindex int) uint8 {
	t.Helper()
	_, st, err := nl.link(ifindex)
	if err != nil {
		t.Fatal(err)
	}
	return st.mode
}

// A vRoCE program that a netlink attachment left behind (say by a crashed
// older version) is found by name and replaced; Close leaves nothing.
func TestStaleProgramIsReplaced(t *testing.T) {
	ha, _ := netnstest.Link(t, netnstest.LinkOpts{})
	netnstest.In(t, ha.NS, func() {
		ifi, nl := interfaceAndNetlink(t, ha.Dev)
		attachByNetlink(t, nl, ifi.Index, progName, func(m *ebpf.Map) asm.Instructions {
			return steeringProgram(m, netip.AddrPortFrom(netip.MustParseAddr(ha.IP), DefaultPort))
		})
		if xdpMode(t, nl, ifi.Index) != xdpAttachedGeneric {
			t.Fatal("the stale program is not attached")
		}
		p, err := Open(ha.IP+":4791", Options{Iface: ha.Dev})
		if err != nil {
			t.Fatalf("Open over a stale vRoCE program: %v", err)
		}
		if xdpMode(t, nl, ifi.Index) != xdpAttachedDriver {
			t.Fatal("our program is not attached in driver mode")
		}
		p.Close()
		if m := xdpMode(t, nl, ifi.Index); m != xdpAttachedNone {
			t.Fatalf("XDP mode %d after Close", m)
		}
	})
}

// Another program on the interface is never replaced: Open says whose it
// is and how to remove it.
func TestForeignProgramIsLeftAlone(t *testing.T) {
	ha, _ := netnstest.Link(t, netnstest.LinkOpts{})
	netnstest.In(t, ha.NS, func() {
		ifi, nl := interfaceAndNetlink(t, ha.Dev)
		attachByNetlink(t, nl, ifi.Index, "someone_else", func(*ebpf.Map) asm.Instructions {
			return asm.Instructions{asm.Mov.Imm(asm.R0, 2), asm.Return()}
		})
		p, err := Open(ha.IP+":4791", Options{Iface: ha.Dev})
		if err == nil {
			p.Close()
			t.Fatal("Open replaced another program")
		}
		if !strings.Contains(err.Error(), `"someone_else"`) || !strings.Contains(err.Error(), "xdp off") {
			t.Fatalf("error does not say whose program or what to do: %v", err)
		}
		if xdpMode(t, nl, ifi.Index) != xdpAttachedGeneric {
			t.Fatal("the other program was removed")
		}
	})
}
