package vroce

import (
	"sync/atomic"
	"time"
)

type deviceCounters struct {
	rxPackets, rxMalformed, rxNoQP, rxBadICRC, rxErrors, rxMADs atomic.Uint64
	rxBadPKey, rxByWaiters                                      atomic.Uint64
	txPackets, txErrors                                         atomic.Uint64
}

// DeviceStats are a device's packet counters.
type DeviceStats struct {
	RxPackets   uint64 // datagrams received
	RxMalformed uint64 // dropped: not a RoCEv2 packet
	RxNoQP      uint64 // dropped: no such QP
	RxBadICRC   uint64 // dropped: ICRC mismatch (corruption)
	RxBadPKey   uint64 // dropped: a P_Key that does not match the port's (IBA 9.6.1.1)
	RxErrors    uint64 // provider receive errors
	// RxProviderDrops counts datagrams the provider dropped before the
	// device saw them (DropCounter): larger than any packet, say.
	RxProviderDrops uint64
	RxMADs          uint64 // management datagrams handed to the GSI owner
	// RxByWaiters counts the datagrams of RxPackets that a goroutine
	// waiting on a CQ received itself, holding the device's receive
	// turn, rather than the device's receive goroutine.
	RxByWaiters uint64
	TxPackets   uint64 // datagrams sent
	TxErrors    uint64 // provider send errors
	// Resources counts the objects alive on the device, as `rdma resource`
	// does: a leak shows here.
	Resources Resources
	// QPs sums the transport counters of the device's QPs (the window and
	// RTT fields: the largest window, the largest SRTT and RTO, the
	// smallest base RTT).
	QPs QPStats
}

// Resources are counts of a device's objects.
type Resources struct{ PD, CQ, MR, QP, SRQ int }

// Stats returns the device's counters.
func (d *Device) Stats() DeviceStats {
	s := &d.stats
	out := DeviceStats{
		RxPackets: s.rxPackets.Load(), RxMalformed: s.rxMalformed.Load(), RxNoQP: s.rxNoQP.Load(),
		RxBadICRC: s.rxBadICRC.Load(), RxBadPKey: s.rxBadPKey.Load(), RxErrors: s.rxErrors.Load(), RxMADs: s.rxMADs.Load(),
		TxPackets: s.txPackets.Load(), TxErrors: s.txErrors.Load(), RxByWaiters: s.rxByWaiters.Load(),
	}
	if dc, ok := d.prov.(DropCounter); ok {
		out.RxProviderDrops = dc.Dropped()
	}
	d.mu.Lock()
	c := &d.count
	out.Resources = Resources{PD: c.pd, CQ: c.cq, MR: c.mr, QP: c.qp, SRQ: c.srq}
	d.mu.Unlock()
	for _, qp := range d.qpTable.all() {
		out.QPs.add(qp.Stats())
	}
	return out
}

// add accumulates q into s.
func (s *QPStats) add(q QPStats) {
	s.TxPackets += q.TxPackets
	s.RxPackets += q.RxPackets
	s.Retransmits += q.Retransmits
	s.Timeouts += q.Timeouts
	s.SeqNAKsSent += q.SeqNAKsSent
	s.SeqNAKsRecv += q.SeqNAKsRecv
	s.RNRNAKsSent += q.RNRNAKsSent
	s.RNRNAKsRecv += q.RNRNAKsRecv
	s.Duplicates += q.Duplicates
	s.OutOfSequence += q.OutOfSequence
	s.WrongSource += q.WrongSource
	s.RemoteAbortErr += q.RemoteAbortErr
	s.SACKsSent += q.SACKsSent
	s.SACKsRecv += q.SACKsRecv
	s.ACKsSent += q.ACKsSent
	s.PiggyACKsSent += q.PiggyACKsSent
	s.PiggyACKsRecv += q.PiggyACKsRecv
	s.HeldOutOfOrder += q.HeldOutOfOrder
	s.FastRetransmits += q.FastRetransmits
	s.TailProbes += q.TailProbes
	s.SpuriousTimeouts += q.SpuriousTimeouts
	s.ForgedResponses += q.ForgedResponses
	s.StaleResponses += q.StaleResponses
	s.HeldDrops += q.HeldDrops
	s.HeldBytes += q.HeldBytes
	s.DupReadLimited += q.DupReadLimited
	s.ReadsRefused += q.ReadsRefused
	s.SendStallHolds += q.SendStallHolds
	s.ReadResponsesSuperseded += q.ReadResponsesSuperseded
	s.PeerBudgetStops += q.PeerBudgetStops
	s.CWnd = max(s.CWnd, q.CWnd)
	s.ReadPace = max(s.ReadPace, q.ReadPace)
	s.SRTT = max(s.SRTT, q.SRTT)
	s.RTO = max(s.RTO, q.RTO)
	if s.MinRTT == 0 || (q.MinRTT != 0 && q.MinRTT < s.MinRTT) {
		s.MinRTT = q.MinRTT
	}
}

// QPStats are one QP's transport counters.
type QPStats struct {
	TxPackets        uint64 // packets sent: requests, responses and ACKs
	RxPackets        uint64 // packets accepted for this QP
	Retransmits      uint64 // request packets sent again
	Timeouts         uint64 // retransmission timer expiries
	SeqNAKsSent      uint64 // PSN sequence error NAKs sent
	SeqNAKsRecv      uint64
	RNRNAKsSent      uint64
	RNRNAKsRecv      uint64
	Duplicates       uint64 // duplicate requests received
	OutOfSequence    uint64 // requests received ahead of the expected PSN
	WrongSource      uint64 // dropped: not from the connected peer
	RemoteAbortErr   uint64 // NAKs other than sequence and RNR received
	SACKsSent        uint64 // ACKs carrying selective acknowledgement blocks
	SACKsRecv        uint64
	ACKsSent         uint64 // RC_ACKNOWLEDGE datagrams: ACKs, NAKs, RNR NAKs
	PiggyACKsSent    uint64 // ACKs that rode on a request instead of a datagram of their own
	PiggyACKsRecv    uint64
	HeldOutOfOrder   uint64 // requests kept out of order for selective repeat
	FastRetransmits  uint64 // loss episodes found from SACKs, before any timeout
	TailProbes       uint64 // tail-loss probes sent
	SpuriousTimeouts uint64 // timeouts undone: the original packets had arrived
	ForgedResponses  uint64 // dropped: a response (ACK, NAK, READ response, atomic ACK) naming no request in flight
	// StaleResponses counts READ responses and atomic ACKs dropped for
	// naming a request already done (a PSN below sndUna): most often the
	// second answer to a READ sent again, which a spurious probe or
	// timeout asks for. A forger can send those too; they are dropped
	// the same way.
	StaleResponses uint64
	HeldDrops      uint64 // out-of-order requests not kept: the QP's or the device's held bytes at their limit
	HeldBytes      int    // what the QP's out-of-order requests hold now
	DupReadLimited uint64 // READ response packets a duplicate READ did not draw: sent at once, ahead of another request, past the QP's budget
	// ReadResponsesSuperseded counts READ response packets a paced
	// answer had yet to send when a duplicate READ asked again
	// (readpace.go).
	ReadResponsesSuperseded uint64
	// SendStallHolds counts loss deadlines (RTO or probe) that passed
	// while this device's own send was stuck and were held, not acted on
	// (sendstall.go).
	SendStallHolds uint64
	// ReadsRefused counts READ requests not executed because the QP's
	// answers in waiting were as many as max_dest_rd_atomic: a requester
	// that keeps the limit never meets it (readpace.go).
	ReadsRefused uint64
	// PeerBudgetStops counts the times the QP stopped sending because
	// the device's QPs to its peer together had as much in flight as
	// the peer's receive buffer is assumed to hold.
	PeerBudgetStops uint64

	CWnd   int           // congestion window, packets
	SRTT   time.Duration // smoothed RTT
	MinRTT time.Duration // base RTT
	// RTO is the retransmission timeout a packet sent now would get,
	// before any backoff: on a shared path, what the peer's will be too.
	RTO time.Duration
	// ReadPace is the rate the QP's large READ answers leave at, packets
	// a second; 0 while they leave whole (readpace.go).
	ReadPace int
}
