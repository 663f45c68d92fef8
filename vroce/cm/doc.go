// Package cm connects RC queue pairs. This file set holds the SOCKET mode
// of the published spec: the two ends exchange their QP details over a TCP
// connection they already have (as perftest does out of band, and as the
// stream layer does before moving data over vRoCE), then move both QPs to
// RTS. The in-band RDMA_CM mode (listen, backlog, REQ/REP/RTU) is to come.
//
//	peer, err := cm.ConnectSocket(ctx, conn, qp, cm.Params{Access: vroce.AccessRemoteWrite})
//
// Both ends call ConnectSocket at once; it is symmetric. It negotiates the
// path MTU (the smaller) and selective repeat (when both speak it).
package cm
