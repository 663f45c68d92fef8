package vroce

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"time"

	"vroce.dev/vroce/wire"
)

// ErrNoDevice is a GSI probe's answer from a host with nothing on the
// port: its kernel refused the datagram (ICMP port unreachable).
var ErrNoDevice = errors.New("vroce: no device on that port")

// ProbeGSI sends mad to the GSI QP (QP1) of the device at to, from a UDP
// socket of its own connected to to, and returns the first MAD that comes
// back and accept takes. It needs no device: a connection manager asks
// this way whether a service listens before it opens one, for providers
// whose devices are reached at their UDP address
// (ProviderTraits.ProbesFromASocket). A host with nothing on the port
// answers at once, with ErrNoDevice. It asks again after each wait next
// gives (next is called once per ask), and when ctx ends before an answer
// it returns (nil, nil): the host is silent.
func ProbeGSI(ctx context.Context, to netip.AddrPort, mad []byte, accept func(mad []byte) bool, next func() time.Duration) ([]byte, error) {
	if !to.IsValid() || to.Port() == 0 {
		return nil, invalidf("GSI probe: %v is not an address with a port", to)
	}
	if len(mad) != MADSize {
		return nil, invalidf("GSI probe: a MAD is %d bytes, not %d", MADSize, len(mad))
	}
	to = netip.AddrPortFrom(to.Addr().Unmap(), to.Port())
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(to))
	if err != nil {
		return nil, fmt.Errorf("vroce: GSI probe %v: %w", to, err)
	}
	defer c.Close()
	local := c.LocalAddr().(*net.UDPAddr).AddrPort()
	flow := wire.Flow{Src: netip.AddrPortFrom(local.Addr().Unmap(), local.Port()), Dst: to}
	out := make([]byte, MADSize+128) // headers, ICRC and room to spare
	n, err := encodeMAD(out, 0, mad)
	if err != nil {
		return nil, err
	}
	out = out[:n]
	flow.Seal(out)

	stop := context.AfterFunc(ctx, func() { c.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	in := make([]byte, len(out))
	back := wire.Flow{Src: flow.Dst, Dst: flow.Src}
	for {
		if _, err := c.Write(out); err != nil && !errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("vroce: GSI probe %v: %w", to, err)
		}
		// next is called for every ask, whether or not ctx has ended
		// meanwhile: a caller may count on it (and a test does). A
		// deadline set after ctx ended would undo AfterFunc's.
		wait := next()
		if ctx.Err() == nil {
			c.SetReadDeadline(time.Now().Add(wait))
		}
		for {
			n, err := c.Read(in)
			var ne net.Error
			switch {
			case errors.Is(err, syscall.ECONNREFUSED):
				return nil, ErrNoDevice
			case ctx.Err() != nil:
				return nil, nil
			case errors.As(err, &ne) && ne.Timeout():
			case err != nil:
				return nil, fmt.Errorf("vroce: GSI probe %v: %w", to, err)
			default:
				var a wire.Packet
				if wire.Parse(&a, in[:n]) == nil && back.Check(in[:n]) && isMAD(&a) && accept(a.Payload) {
					return append([]byte(nil), a.Payload...), nil
				}
				continue // not our answer: keep reading
			}
			break // ask again
		}
	}
}
