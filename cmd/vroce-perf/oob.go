package main

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"time"

	"vroce.dev/vroce"
)

// What every foreign tool's end shares (pingpong.go, srqpingpong.go,
// perftest.go, rping.go, udaddy.go): its TCP exchange, its device, the
// address it names to the peer, and UD QPs made ready as the tools make
// theirs.

// oobControl opens a tool's TCP exchange: accepts one connection on
// --port, saying so on stderr (tests wait for "server waiting on"), or
// dials the server's.
func oobControl(cfg *config, tool string) (net.Conn, error) {
	if cfg.Server != "" {
		return net.DialTimeout("tcp", net.JoinHostPort(cfg.Server, strconv.Itoa(cfg.Port)), 30*time.Second)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("", strconv.Itoa(cfg.Port)))
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	fmt.Fprintf(os.Stderr, "vroce-perf: %s server waiting on TCP port %d\n", tool, cfg.Port)
	return ln.Accept()
}

// openOOBDevice opens the device at --dev-addr, or on RoCEv2's port at
// local (all addresses when local is not known): another RoCE peer sends
// to 4791 only.
func openOOBDevice(cfg *config, local netip.Addr) (*vroce.Device, error) {
	addr := cfg.DevAddr
	if addr == "" {
		addr = ":4791"
		if local.IsValid() {
			addr = netip.AddrPortFrom(local, 4791).String()
		}
	}
	return vroce.Open(vroce.Config{Provider: cfg.Provider, Addr: addr, ProviderOptions: cfg.providerOptions()})
}

// advertisedAddr is the address the peer sends to: the device's, or,
// when it listens on all addresses, local, the one the peer reached us
// at.
func advertisedAddr(dev *vroce.Device, local netip.Addr) netip.Addr {
	if a := dev.LocalAddr().Addr().Unmap(); !a.IsUnspecified() {
		return a
	}
	return local
}

// readyUD moves a UD QP to RTS with qkey, as the tools' UD QPs go: INIT
// with the Q_Key, RTR, RTS from psn.
func readyUD(qp *vroce.QP, qkey, psn uint32) error {
	for _, s := range []struct {
		a vroce.QPAttr
		m vroce.QPAttrMask
	}{
		{vroce.QPAttr{State: vroce.QPSInit, QKey: qkey}, vroce.QPAttrState | vroce.QPAttrQKey},
		{vroce.QPAttr{State: vroce.QPSRTR}, vroce.QPAttrState},
		{vroce.QPAttr{State: vroce.QPSRTS, SQPSN: psn}, vroce.QPAttrState | vroce.QPAttrSQPSN},
	} {
		if err := qp.Modify(&s.a, s.m); err != nil {
			return err
		}
	}
	return nil
}
