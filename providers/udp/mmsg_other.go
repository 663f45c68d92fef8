//go:build !linux

package udp

import (
	"net"
	"time"
)

// Off Linux the provider receives through x/net.
func newBatchReader(*net.UDPConn, int, time.Duration) batchReader { return nil }
