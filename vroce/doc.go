// Package vroce is a pure-Go RDMA device: the verbs (Device, PD, MR, CQ,
// SRQ, QP of type RC and UD, AH, work requests and completions) and the
// transport engine behind them, speaking RoCEv2 over an ordinary, lossy
// network through a swappable packet provider.
//
// A program opens a device on a provider by name, then uses the verbs much
// as it would libibverbs:
//
//	import _ "vroce.dev/providers/udp"
//
//	dev, _ := vroce.Open(vroce.Config{Addr: "10.0.0.1:4791"})
//	pd, _ := dev.AllocPD()
//	cq, _ := dev.CreateCQ(1024)
//	mr, _ := pd.RegMR(buf, vroce.AccessLocalWrite|vroce.AccessRemoteWrite)
//	qp, _ := pd.CreateQP(vroce.QPInitAttr{Type: vroce.RC, SendCQ: cq, RecvCQ: cq, Cap: ...})
//	qp.Modify(&vroce.QPAttr{State: vroce.QPSInit, ...}, mask) // then RTR, RTS
//	qp.PostSend(vroce.SendWR{Opcode: vroce.WRRDMAWrite, SGL: []vroce.SGE{mr.SGE(0, n)}, ...})
//	n, err := cq.PollWait(ctx, wc)
//
// Limits are the published vRoCE ones (SPEC.md): a request beyond one fails
// at creation with a *LimitError naming the limit. Malformed arguments fail
// with errors wrapping ErrInvalid, wrong states with ErrState.
//
// # Engine
//
// A device runs two goroutines whatever the number of QPs: one receives
// packet batches from the provider and runs each QP's responder and
// completer, one runs retransmission and RNR timers. With a provider whose
// receive can be interrupted (RecvInterrupter: udp, sim), a goroutine
// waiting on a CQ takes over the receiving while it waits, so that the
// packet that completes its work wakes it directly, with no hand-off
// between goroutines (receiveTurn in turn.go); so does one waiting on a
// Signal for news a completion handler leaves it (rsock's stream reader,
// signal.go). A Wait on a CQ with a completion handler leaves the turn
// alone: the handler takes its completions wherever they land. Requests are built and
// sent by the goroutine that posts them, under the QP's lock, so they leave
// in PSN order. Queues grow with use, so an idle QP costs little memory.
//
// RC follows the InfiniBand roles, one file each as rxe has them: the
// requester (requester.go) assigns PSNs and sends within the window, the
// pacer and the peer budget (peerbudget.go); the completer (completer.go)
// takes ACKs, NAKs, READ responses and atomic ACKs and completes work in
// order; the responder (responder.go, with held.go) executes requests,
// and paces its READ answers, and meters duplicates', once the requester
// has lost part of one (readpace.go).
// The requester's state is split by concern: the send queue (sendqueue.go,
// which UD uses too), the scoreboard of PSNs in flight with SACK marking
// and RACK-style loss detection (scoreboard.go), loss recovery's RTT, RTO,
// backoff and tail-loss probes (recovery.go, on internal/rtt), and
// delay-based congestion control, which reads the standing RTT, with its
// pacer (congestion.go); the completer judges whether a timeout that
// collapsed the window was spurious (completer.go). A receive
// batch (rxbatch.go) owes its coalesced ACKs when it ends, and holds for
// a while the ACK of a QP whose program answers, for the answer to carry
// (holdAcks; the timer goroutine sees it leave when due); the responder
// owes an ack and the completer takes one, from its own packet or riding
// on a request.
//
// Two modes, chosen when a QP connects. Between vRoCE peers (selective
// repeat negotiated): the responder holds requests that arrive ahead of
// the PSN it expects, within bounds, and reports them in SACK blocks; the
// requester resends only what is lost, found by SACKs, by RACK's timing or
// by a probe, keeps sending while it repairs (its window bounds the
// packets in the network, not the span from the oldest hole), and the
// path's delay, not every loss, trims its window.
// With any other RoCE peer the QP behaves as rdma_rxe: the responder NAKs
// the first gap and the requester goes back to it. Either way messages
// segment at the path MTU, PSNs are 24-bit, the retransmission timer
// recovers lost tails, duplicates are acknowledged and atomics are
// answered from a result cache, never executed twice. Remote accesses are
// checked against the MR's key, PD, bounds and access flags before any
// byte moves. Keys, QPNs and initial PSNs are random (internal/secrand).
//
// # Memory ordering
//
// The device reads and writes registered memory from its own goroutines,
// under the QP's lock, as a NIC would by DMA. In Go's memory model your
// program's accesses to that memory are ordered with the device's by the
// verbs calls that take that lock or the CQ's: polling a completion,
// posting a work request, Modify, State. The usual RDMA protocol (write
// the buffer, then post a SEND saying so; read the buffer after its
// completion) is therefore race-free; reading memory a peer wrote with no
// verbs call in between is a data race, as it is on hardware. One race is
// the protocol's own: a READ whose response was lost is asked again, and
// a late duplicate request may read the memory again after the READ
// completed at the requester, as rdma_rxe and NICs do. That response is
// discarded; memory a peer READs should not change until the peer says it
// is done with it.
package vroce
