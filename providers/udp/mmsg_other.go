//go:build !linux

package udp

import "net"

// Off Linux the provider receives through x/net.
func newBatchReader(*net.UDPConn, int) batchReader { return nil }
