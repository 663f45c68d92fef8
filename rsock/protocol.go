package rsock

import (
	"encoding/binary"
	"fmt"
)

// The stream protocol on the wire: the messages a stream's QP carries,
// and the hello both ends exchange when they connect.

// Every message is a SEND with immediate data: its kind in the top four
// bits, and in the low sixteen the credits the sender grants back (how
// many more data messages it will take). Data messages carry stream
// bytes and use a credit; control messages carry none, use none, and
// their receive buffer goes straight back to the SRQ.
const (
	kindData = iota
	kindCredit
	kindFIN
	kindRST
	kindKeepalive
)

func immediate(kind, grant int) uint32 { return uint32(kind)<<28 | uint32(min(grant, 0xffff)) }

// The hello's layout: a magic byte, the version, the window (16 bits)
// and the buffer size (32 bits), big-endian.
const (
	helloMagic   = 'r'
	helloVersion = 1
	helloLen     = 8
)

// streamHello is what each end tells the other at connection time, as the
// private data of the SOCKET exchange or of the CM's REQ and REP: how many
// messages it takes at once (the credits it grants) and how large.
type streamHello struct {
	window  int
	bufSize int
}

func (h streamHello) marshal() []byte {
	b := make([]byte, helloLen)
	b[0], b[1] = helloMagic, helloVersion
	binary.BigEndian.PutUint16(b[2:], uint16(h.window))
	binary.BigEndian.PutUint32(b[4:], uint32(h.bufSize))
	return b
}

func parseStreamHello(b []byte) (streamHello, error) {
	if len(b) < helloLen || b[0] != helloMagic {
		return streamHello{}, fmt.Errorf("rsock: the peer's QP is not a stream endpoint")
	}
	if b[1] != helloVersion {
		return streamHello{}, fmt.Errorf("rsock: the peer speaks stream version %d, we speak %d", b[1], helloVersion)
	}
	h := streamHello{window: int(binary.BigEndian.Uint16(b[2:])), bufSize: int(binary.BigEndian.Uint32(b[4:]))}
	if h.window < 1 || h.bufSize < 1024 || h.bufSize > 1<<24 {
		return streamHello{}, fmt.Errorf("rsock: the peer offers %d buffers of %d bytes", h.window, h.bufSize)
	}
	return h, nil
}

// ourHello is what every stream of this implementation offers.
func ourHello() streamHello { return streamHello{window: window, bufSize: bufSize} }
