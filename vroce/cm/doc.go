// Package cm connects RC queue pairs, in the two modes of the published
// spec.
//
// SOCKET: the two ends exchange their QP details over a TCP connection
// they already have (as perftest does out of band, and as the stream layer
// does before moving data over vRoCE), then move both QPs to RTS. Both
// ends call ConnectSocket at once; it is symmetric.
//
//	peer, err := cm.ConnectSocket(ctx, conn, qp, cm.Params{Access: vroce.AccessRemoteWrite})
//
// RDMA_CM: an in-band connection manager, no TCP. A Manager owns a
// device's QP1 and speaks the InfiniBand CM protocol (REQ, REP, RTU, REJ,
// MRA, DREQ, DREP as MADs, laid out as Linux lays them out) over the
// device's provider, repeating messages lost on the way. A service listens
// on a port with a backlog; a full backlog drops new requests unanswered
// and their senders try again, as rdma_ucm does (max_backlog: 1,024 by
// default, 65,536 for 262,144 QPs).
//
//	m, _ := cm.New(dev, cm.Config{})
//	l, _ := m.Listen(0, 0)            // the device's port, the full backlog
//	req, _ := l.Accept(ctx)           // passive end
//	id, _ := req.Accept(qp, cm.Params{PrivateData: welcome})
//
//	id, err := m.Connect(ctx, qp, serverAddr, cm.Params{}) // active end
//	defer id.Disconnect()
//
// A Manager also answers IB CM service ID resolution (SIDR) for every
// service it listens on; Probe and Manager.Probe ask it, which is how a
// dialer learns whether a vRoCE service is behind host:port before it
// speaks to a TCP server there. In rdma_cm's UDP port space SIDR is the
// whole exchange: ListenUD names the UD QP that serves a port, and
// ResolveUD learns it (its QPN and Q_Key, UDPQKey on every rdma_cm QP of
// that space), as librdmacm's udaddy does.
//
//	l, _ := m.ListenUD(7174, udQP)                          // server
//	peer, err := m.ResolveUD(ctx, serverAddr, 7174)         // client: then send to peer.QPN
//
// Both modes negotiate the path MTU (the smaller) and the vRoCE
// extensions, each when both ends speak it: selective repeat, ACKs that
// ride on requests, and the extension path MTUs, 1344 for 1500-byte
// links and 8192 to 32768 (a REQ shows the largest IB MTU below to any
// other CM and offers more where only vRoCE looks), and the UDP checksum
// in place of the ICRC when both devices' providers verify it
// (vroce.QPAttr.UDPChecksum). Params.GoBackN offers none of them. A refused connection is a *RejectError, which
// is also syscall.ECONNREFUSED. Every connection made by a Manager ends
// with Disconnect, the peer's, or Manager.Close; its QP is the caller's to
// destroy after.
package cm
