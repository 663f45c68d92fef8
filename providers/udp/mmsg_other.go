//go:build !linux

package udp

import (
	"net"
	"time"
)

// Off Linux the provider receives and sends through x/net.
func newBatchReader(*net.UDPConn, int, time.Duration) batchReader { return nil }

func newBatchWriter(*net.UDPConn, int, bool) batchWriter { return nil }
