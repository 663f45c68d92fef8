package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"vroce.dev/vroce"
	"vroce.dev/vroce/cm"
)

// --oob perftest: the TCP exchange of perftest's ib_write_bw, ib_read_bw,
// ib_send_bw, ib_atomic_bw, ib_send_lat, ib_write_lat, ib_read_lat and
// ib_atomic_lat (perftest_communication.c; -R for ib_write_bw,
// ib_read_bw, ib_send_bw and ib_send_lat), so that vroce-perf is either
// end of them against any RoCE peer:
//
//	vroce-perf write_bw --oob perftest -s 8192 -n 50 HOST     # as: ib_write_bw -s 8192 -n 50 HOST
//
// On TCP port 18515, in lock step (the client writes each message first,
// the server reads it first): a 16-byte version string; two 4-byte
// integers (page and cache line sizes); the path MTU's enum as 2 bytes
// of text; then each end's QP as a 108-byte text record
// (LID:OUT_READS:QPN:PSN:RKEY:VADDR:GID bytes:SRQN:), three times around
// the QP's connection (four for ib_write_lat, ib_read_lat and
// ib_atomic_lat); the test; for the bandwidth tests, the record again
// and five 8-byte report fields (size, iterations, peak and average
// bandwidth, message rate); but for ib_write_lat, the record a last
// time and "done\0".

// perftestVersion is the version we say we speak: what perftest 4.5
// says (its packages' 6.06), which it needs to be at least 5.70.
const perftestVersion = "6.06"

const (
	pfVersionLen = 16
	pfKeysLen    = 108
	pfDone       = "done\x00"
	pfPageSize   = 4096
	pfCacheLine  = 64
)

// pfKeys is one QP's record.
type pfKeys struct {
	lid      uint16
	outReads uint16
	qpn, psn uint32
	rkey     uint32
	vaddr    uint64
	gid      [16]byte
	srqn     uint32
}

var errPFKeys = errors.New("perftest: malformed QP record")

func (k *pfKeys) marshal() []byte {
	b := fmt.Appendf(nil, "%04x:%04x:%06x:%06x:%08x:%016x:", k.lid, k.outReads, k.qpn, k.psn, k.rkey, k.vaddr)
	for _, g := range k.gid {
		b = fmt.Appendf(b, "%02x:", g)
	}
	b = fmt.Appendf(b, "%08x:", k.srqn)
	return append(b, make([]byte, pfKeysLen-len(b))...)
}

// parsePFKeys reads a record from the network: 23 colon-ended hex
// fields, then NULs.
func parsePFKeys(b []byte) (pfKeys, error) {
	var k pfKeys
	if len(b) != pfKeysLen {
		return k, fmt.Errorf("%w: %d bytes", errPFKeys, len(b))
	}
	text, _, _ := strings.Cut(string(b), "\x00")
	f := strings.Split(text, ":")
	widths := []int{4, 4, 6, 6, 8, 16}
	if len(f) != 24 || f[23] != "" {
		return k, fmt.Errorf("%w: %q", errPFKeys, text)
	}
	vals := make([]uint64, 23)
	for i := range 23 {
		w := 2
		switch {
		case i < len(widths):
			w = widths[i]
		case i == 22:
			w = 8
		}
		v, err := strconv.ParseUint(f[i], 16, 64)
		if err != nil || len(f[i]) != w {
			return k, fmt.Errorf("%w: field %d %q", errPFKeys, i, f[i])
		}
		vals[i] = v
	}
	if vals[2] > 0xffffff || vals[3] > 0xffffff {
		return k, fmt.Errorf("%w: QPN %#x, PSN %#x beyond 24 bits", errPFKeys, vals[2], vals[3])
	}
	k.lid, k.outReads = uint16(vals[0]), uint16(vals[1])
	k.qpn, k.psn, k.rkey, k.vaddr = uint32(vals[2]), uint32(vals[3]), uint32(vals[4]), vals[5]
	for i := range k.gid {
		k.gid[i] = byte(vals[6+i])
	}
	k.srqn = uint32(vals[22])
	return k, nil
}

// pfConn is the lock-stepped exchange: over TCP, or with -R (perftest's
// RDMA_CM mode) as SENDs on a QP of its own.
type pfConn struct {
	client bool
	// send and recv move one message each way: a TCP write and read, or
	// a SEND and a receive.
	send func([]byte) error
	recv func(n int) ([]byte, error)
	cm   bool // -R: records in binary, no "done"
	// hangUp waits for the peer to close the exchange, having sent
	// nothing more.
	hangUp func() error
}

// xchg sends mine and receives the peer's message of n bytes, in the
// order the two roles keep.
func (p *pfConn) xchg(mine []byte, n int) ([]byte, error) {
	if p.client {
		if err := p.send(mine); err != nil {
			return nil, err
		}
	}
	theirs, err := p.recv(n)
	if err != nil {
		return nil, fmt.Errorf("perftest exchange: %w", err)
	}
	if !p.client {
		if err := p.send(mine); err != nil {
			return nil, err
		}
	}
	return theirs, nil
}

// tcpConn is the exchange over a TCP connection.
func tcpConn(c net.Conn, client bool) *pfConn {
	return &pfConn{client: client,
		send: func(b []byte) error { _, err := c.Write(b); return err },
		recv: func(n int) ([]byte, error) {
			b := make([]byte, n)
			_, err := io.ReadFull(c, b)
			return b, err
		},
		hangUp: func() error {
			n, err := c.Read(make([]byte, 1))
			switch {
			case n > 0:
				return errors.New("perftest exchange: the peer sent more after its test")
			case errors.Is(err, io.EOF):
				return nil
			}
			return fmt.Errorf("perftest exchange: waiting for the peer to hang up: %w", err)
		}}
}

// keys trades QP records.
func (p *pfConn) keys(mine *pfKeys) (pfKeys, error) {
	if p.cm {
		b, err := p.xchg(mine.marshalBinary(), pfDestLen)
		if err != nil {
			return pfKeys{}, err
		}
		return parsePFDest(b)
	}
	b, err := p.xchg(mine.marshal(), pfKeysLen)
	if err != nil {
		return pfKeys{}, err
	}
	return parsePFKeys(b)
}

// pfDestLen is the size of struct pingpong_dest, which -R sends as it
// lies in memory, its integers big-endian: lid, out_reads, qpn, psn,
// rkey (4 bytes each), 4 of padding, vaddr (8), the GID (16), srqn and
// gid_index (4 each).
const pfDestLen = 56

func (k *pfKeys) marshalBinary() []byte {
	b := make([]byte, pfDestLen)
	be := binary.BigEndian
	be.PutUint32(b[0:], uint32(k.lid))
	be.PutUint32(b[4:], uint32(k.outReads))
	be.PutUint32(b[8:], k.qpn)
	be.PutUint32(b[12:], k.psn)
	be.PutUint32(b[16:], k.rkey)
	be.PutUint64(b[24:], k.vaddr)
	copy(b[32:48], k.gid[:])
	be.PutUint32(b[48:], k.srqn)
	return b
}

// parsePFDest reads a binary record from the network.
func parsePFDest(b []byte) (pfKeys, error) {
	if len(b) != pfDestLen {
		return pfKeys{}, fmt.Errorf("%w: %d bytes, want %d", errPFKeys, len(b), pfDestLen)
	}
	be := binary.BigEndian
	k := pfKeys{lid: uint16(be.Uint32(b)), outReads: uint16(be.Uint32(b[4:])), qpn: be.Uint32(b[8:]) & 0xffffff,
		psn: be.Uint32(b[12:]) & 0xffffff, rkey: be.Uint32(b[16:]), vaddr: be.Uint64(b[24:]), srqn: be.Uint32(b[48:])}
	copy(k.gid[:], b[32:48])
	return k, nil
}

// preamble trades versions, system data and path MTUs, and returns the
// MTU both ends use.
func (p *pfConn) preamble(mtu vroce.MTU) (vroce.MTU, error) {
	v := make([]byte, pfVersionLen)
	copy(v, perftestVersion)
	theirs, err := p.xchg(v, pfVersionLen)
	if err != nil {
		return 0, err
	}
	rv, _, _ := strings.Cut(string(theirs), "\x00")
	if f, err := strconv.ParseFloat(rv, 64); err != nil || f < 5.70 {
		return 0, fmt.Errorf("perftest: the peer speaks version %q; this exchange is perftest's from 5.70 on", rv)
	}
	for _, x := range []uint32{pfPageSize, pfCacheLine} {
		if _, err := p.xchg(binary.BigEndian.AppendUint32(nil, x), 4); err != nil {
			return 0, err
		}
	}
	code := ibMTUEnum(mtu)
	b, err := p.xchg([]byte{byte('0' + code), 0}, 2)
	if err != nil {
		return 0, err
	}
	if r := int(b[0] - '0'); r >= 1 && r <= 5 && r < code {
		code = r
	}
	return vroce.MTU(128 << code), nil
}

// ibMTUEnum is enum ibv_mtu: 1 for 256 up to 5 for 4096.
func ibMTUEnum(m vroce.MTU) int {
	c := 1
	for v := vroce.MTU256; v < m.IB(); v *= 2 {
		c++
	}
	return c
}

// pfReport is what perftest's ends trade after a bandwidth test.
type pfReport struct {
	size, iters     uint64
	peak, avg, rate float64 // MiB/s, MiB/s, millions of messages a second
}

// reports trades the five report fields, ours for the peer's: byte
// counts as 64-bit integers, rates as doubles, all big-endian.
func (p *pfConn) reports(mine pfReport) (pfReport, error) {
	var theirs [5]uint64
	for i, v := range []uint64{mine.size, mine.iters, math.Float64bits(mine.peak), math.Float64bits(mine.avg), math.Float64bits(mine.rate)} {
		b, err := p.xchg(binary.BigEndian.AppendUint64(nil, v), 8)
		if err != nil {
			return pfReport{}, err
		}
		theirs[i] = binary.BigEndian.Uint64(b)
	}
	return pfReport{size: theirs[0], iters: theirs[1], peak: math.Float64frombits(theirs[2]),
		avg: math.Float64frombits(theirs[3]), rate: math.Float64frombits(theirs[4])}, nil
}

// runPerftest runs one end of ib_write_bw, ib_read_bw, ib_send_bw or
// ib_send_lat, over a TCP exchange or, with --rdma-cm, perftest's -R.
func runPerftest(cfg *config) error {
	client := cfg.Server != ""
	var p *pfConn
	var dev *vroce.Device
	var ctl *pfControl
	var local netip.Addr
	var err error
	if cfg.RDMACM {
		if dev, err = openOOBDevice(cfg, netip.Addr{}); err != nil {
			return err
		}
		defer dev.Close()
		if ctl, err = newPFControl(dev, cfg); err != nil {
			return err
		}
		defer ctl.close()
		p, local = ctl.conn, dev.LocalAddr().Addr().Unmap()
	} else {
		c, err := oobControl(cfg, "perftest "+cfg.Test)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(time.Duration(cfg.Iters)*time.Second + 60*time.Second))
		p, local = tcpConn(c, client), controlIP(c)
		if dev, err = openOOBDevice(cfg, local); err != nil {
			return err
		}
		defer dev.Close()
	}
	local = advertisedAddr(dev, local) // the address our GID names
	mtu := vroce.MTU(cfg.MTU)
	if mtu == 0 {
		mtu = dev.Attr().ActiveMTU.IB()
	}
	if mtu, err = p.preamble(mtu); err != nil {
		return err
	}
	pd, err := dev.AllocPD()
	if err != nil {
		return err
	}
	depth, nqp := cfg.TxDepth, cfg.QPs
	cq, err := dev.CreateCQ(nqp*(2*depth+pfRecvs) + 8)
	if err != nil {
		return err
	}
	// The peer's writes and reads cycle through twice a page or message
	// of ours, as perftest's own buffers do.
	bufSize := max(cfg.Size, pfPageSize)
	if cfg.AllSizes {
		bufSize = pfLargestAll
	}
	buf := make([]byte, 2*bufSize)
	for i := range buf {
		buf[i] = byte(i*7 + 1)
	}
	buf0 := bytes.Clone(buf)
	mr, err := pd.RegMR(buf, vroce.AccessLocalWrite|vroce.AccessRemoteWrite|vroce.AccessRemoteRead|vroce.AccessRemoteAtomic)
	if err != nil {
		return err
	}
	// Every QP of ours offers the same memory: perftest's peer writes,
	// reads and adds there from each.
	outReads := min(16, dev.Attr().MaxQPRdAtom)
	qps, mines, peers := make([]*vroce.QP, nqp), make([]pfKeys, nqp), make([]pfKeys, nqp)
	for i := range qps {
		if qps[i], err = pd.CreateQP(vroce.QPInitAttr{Type: vroce.RC, SendCQ: cq, RecvCQ: cq,
			Cap: vroce.QPCap{MaxSendWR: depth, MaxRecvWR: pfRecvs, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
			return err
		}
		mines[i] = pfKeys{outReads: uint16(outReads), qpn: qps[i].QPN(), psn: randomPSN(),
			rkey: mr.RKey(), vaddr: mr.Addr(), gid: local.As16()}
	}
	if cfg.Test == "write_lat" || cfg.Duplex {
		// The peer writes (or reads) in the second half, and we send
		// (or read into) the first: with both ends moving data at once,
		// ours never meets theirs. For write_lat it starts zeroed (no
		// count of theirs: with --all, each size's count lands past
		// what the smaller sizes wrote).
		clear(buf[bufSize:])
		for i := range mines {
			mines[i].vaddr += uint64(bufSize)
		}
	}
	qp, mine := qps[0], &mines[0] // the one QP of the latency tests, and the syncs' record
	if cfg.RDMACM {
		// A sync, the test QP's connection through RDMA_CM, a sync.
		if _, err := p.keys(mine); err != nil {
			return err
		}
		if err := ctl.connectTest(qp, outReads); err != nil {
			return err
		}
		for range 2 {
			if peers[0], err = p.keys(mine); err != nil {
				return err
			}
		}
		if _, err := p.keys(mine); err != nil {
			return err
		}
	} else {
		if pfSyncsFirst(cfg.Test) {
			// Their tools trade the records once more first, as a sync.
			if _, err := p.keys(mine); err != nil {
				return err
			}
		}
		// Each QP's record, the connections, each record again.
		for i := range qps {
			if peers[i], err = p.keys(&mines[i]); err != nil {
				return err
			}
		}
		for i := range qps {
			if err := pfConnect(qps[i], &mines[i], &peers[i], mtu); err != nil {
				return err
			}
		}
		for i := range qps {
			if _, err := p.keys(&mines[i]); err != nil {
				return err
			}
		}
	}
	if _, err := p.keys(mine); err != nil { // after RTR
		return err
	}
	peer := peers[0]
	var peak, avg, rate float64
	count := cfg.Iters * nqp // messages the client moved: -n of each QP, or what -D allowed
	var lat *result
	// measure runs the test at one message size; with --all, at every
	// size from 2 B to 8 MiB in turn, no sync between them, printing a
	// line for each (the report the server gets is the last size's).
	size := cfg.Size
	measureAt := func(n int) error {
		sized := *cfg
		sized.Size = n
		start := time.Now()
		done, err := pfRun(&sized, qps, cq, mr, peers)
		if err != nil {
			return err
		}
		secs := time.Since(start).Seconds()
		count = done
		msgs := float64(done)
		size, avg = n, float64(n)*msgs/secs/(1<<20)
		peak, rate = avg, msgs/secs/1e6
		return nil
	}
	measure := func() error {
		if !cfg.AllSizes {
			return measureAt(cfg.Size)
		}
		printBWHeader()
		for _, n := range pfSizes(cfg) {
			if err := measureAt(n); err != nil {
				return err
			}
			printBWLine(n, count, peak, avg, rate)
		}
		return nil
	}
	if cfg.Test == "send_lat" {
		// Both ends post a receive, sync, and play ping-pong, the
		// client first (perftest's run_iter_lat_send).
		pp := &pingpong{cfg: cfg, dev: dev, qp: qp, cq: cq, mr: mr, rxDepth: 1, slot: cfg.Size}
		if err := pp.postRecv(0); err != nil {
			return err
		}
		if _, err := p.keys(mine); err != nil {
			return err
		}
		start := time.Now()
		if err := pp.run(); err != nil {
			return err
		}
		pp.peer = ppDest{qpn: peer.qpn, gid: peer.gid}
		pp.report(os.Stdout, time.Since(start))
	} else if cfg.Test == "write_lat" || cfg.Test == "read_lat" || cfg.Test == "atomic_lat" {
		// write_lat: both ends play ping-pong. read_lat and atomic_lat:
		// the client reads or adds one operation at a time while the
		// server waits for it to finish (perftest's run_iter_lat).
		// With --all, each size in turn, a result for each.
		for _, n := range pfSizes(cfg) {
			sized := *cfg
			sized.Size = n
			switch {
			case cfg.Test == "write_lat":
				lat, err = pfWriteLat(&sized, dev, qp, cq, mr, &buf[bufSize+n-1], &peer, mtu, !p.client)
			case p.client:
				lat, err = pfLatency(&sized, qp, cq, mr, &peer, mtu)
			}
			if err != nil {
				return err
			}
			if lat != nil && cfg.AllSizes {
				lat.print(os.Stdout, cfg.JSON)
				lat = nil
			}
		}
	} else if cfg.Duplex {
		// perftest's -b: both ends sync, both move -n, and each reports
		// the sum of what the two measured. With send_bw each end posts
		// its receives before the sync. With -a, each size in turn, and
		// a second sync after each (perftest's tools from 4.6 on, which
		// all peers this exchange admits are), each printing its sum.
		if cfg.Test == "send_bw" {
			if err := pfPostRecvs(qps, mr, cfg); err != nil {
				return err
			}
		}
		if cfg.AllSizes {
			printBWHeader()
		}
		for _, n := range pfSizes(cfg) {
			if _, err := p.keys(mine); err != nil {
				return err
			}
			if err := measureAt(n); err != nil {
				return err
			}
			if cfg.AllSizes {
				if _, err := p.keys(mine); err != nil {
					return err
				}
			}
			theirs, err := p.reports(pfReport{uint64(size), uint64(count), peak, avg, rate})
			if err != nil {
				return err
			}
			peak, avg, rate = peak+theirs.peak, avg+theirs.avg, rate+theirs.rate
			if cfg.AllSizes {
				printBWLine(n, count, peak, avg, rate)
			}
		}
	} else if cfg.Test == "send_bw" {
		// The server posts its receives, both ends sync, the client
		// sends and the server receives; no reports are traded.
		if !p.client {
			if err := pfPostRecvs(qps, mr, cfg); err != nil {
				return err
			}
		}
		if _, err := p.keys(mine); err != nil {
			return err
		}
		if err := measure(); err != nil {
			return err
		}
	} else {
		if p.client {
			if err := measure(); err != nil {
				return err
			}
		}
		if _, err := p.keys(mine); err != nil { // the client is done
			return err
		}
		if _, err := p.reports(pfReport{uint64(size), uint64(count), peak, avg, rate}); err != nil {
			return err
		}
	}
	if ctl != nil {
		ctl.closing = true
	}
	if cfg.Test == "write_lat" {
		// ib_write_lat trades nothing after its test. The server saw
		// the client's last WRITE land before the ACK for it left: it
		// keeps its device until the client, holding that ACK, hangs up.
		if !p.client {
			if err := p.hangUp(); err != nil {
				return err
			}
		}
	} else {
		if _, err := p.keys(mine); err != nil {
			return err
		}
		if !p.cm {
			if err := p.send([]byte(pfDone)); err != nil {
				return err
			}
		}
	}
	if cfg.Test == "send_lat" {
		return nil // the ping-pong reported
	}
	if lat != nil {
		lat.print(os.Stdout, cfg.JSON)
	} else if (p.client || cfg.Test == "send_bw" || cfg.Duplex) && !cfg.AllSizes {
		printBWHeader()
		printBWLine(cfg.Size, count, peak, avg, rate)
	}
	for i, qp := range qps {
		s := qp.Stats()
		fmt.Printf("peer %v QPN %#x: %d packets sent, %d received, %d retransmitted, %d timeouts\n",
			netip.AddrFrom16(peers[i].gid).Unmap(), peers[i].qpn, s.TxPackets, s.RxPackets, s.Retransmits, s.Timeouts)
	}
	printRefusals(os.Stdout, refusals(dev.Stats()))
	if isAtomicTest(cfg.Test) && !p.client {
		// Closing the device ends the goroutines that added to buf:
		// after it, buf holds every addition the client made.
		dev.Close()
		return checkAdditions(buf, buf0, cfg.Iters*nqp)
	}
	return nil
}

// pfSizes are the message sizes a run moves: -s, or with --all every
// power of two from 2 bytes to 8 MiB, as perftest's -a.
func pfSizes(cfg *config) []int {
	if !cfg.AllSizes {
		return []int{cfg.Size}
	}
	var sizes []int
	for n := 2; n <= pfLargestAll; n *= 2 {
		sizes = append(sizes, n)
	}
	return sizes
}

// pfSyncsFirst says whether test's perftest tool trades the QP records
// once more before the ones around the connection (four times in all).
func pfSyncsFirst(test string) bool {
	return test == "read_lat" || test == "atomic_lat" || test == "write_lat"
}

// isAtomicTest says whether test is one of perftest's atomics, which
// fetch and add 1 at 8-byte words of the server's buffer.
func isAtomicTest(test string) bool { return test == "atomic_bw" || test == "atomic_lat" }

// checkAdditions verifies, on the server of an atomic test, that the
// client's iters fetch-and-adds of 1 each landed once: the 8-byte words
// of buf grew by iters in all from buf0, wherever they landed.
func checkAdditions(buf, buf0 []byte, iters int) error {
	var grew uint64
	for i := 0; i+8 <= len(buf); i += 8 {
		grew += binary.NativeEndian.Uint64(buf[i:]) - binary.NativeEndian.Uint64(buf0[i:])
	}
	if grew != uint64(iters) {
		return fmt.Errorf("perftest: the client's %d fetch-and-adds of 1 grew this end's memory by %d", iters, grew)
	}
	fmt.Printf("%d fetch-and-adds landed, each once\n", iters)
	return nil
}

// pfConnect moves the QP to RTS as perftest's ctx_connect does: min RNR
// timer 12, our out_reads answered, the peer's issued at most.
func pfConnect(qp *vroce.QP, mine, peer *pfKeys, mtu vroce.MTU) error {
	dest := netip.AddrPortFrom(netip.AddrFrom16(peer.gid).Unmap(), 4791)
	err := cm.Connect(qp, mine.psn, cm.Peer{QPN: peer.qpn, PSN: peer.psn, Addr: dest, MTU: mtu, MaxRdAtomic: max(int(peer.outReads), 1)},
		cm.Params{Access: vroce.AccessRemoteWrite | vroce.AccessRemoteRead | vroce.AccessRemoteAtomic, MinRNRTimer: 12, MaxRdAtomic: int(mine.outReads)})
	if err != nil {
		return fmt.Errorf("perftest: connect to %v: %w", dest, err)
	}
	return nil
}

// pfLargestAll is the largest size perftest's -a runs (1 << 23).
const pfLargestAll = 8 << 20

// printBWHeader and printBWLine print perftest's result lines.
func printBWHeader() {
	fmt.Printf(" #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n")
}

func printBWLine(size, iters int, peak, avg, rate float64) {
	fmt.Printf(" %-10d %-14d %-18.2f %-20.2f %.6f\n", size, iters, peak, avg, rate)
}

// pfRecvs is how many receives a send_bw server keeps posted (perftest's
// rx-depth).
const pfRecvs = 512

// pfRecvSGE is where a send_bw receive lands: the start of the buffer,
// as perftest's, or with -b the start of its second half, clear of the
// first half our own SENDs read from.
func pfRecvSGE(mr *vroce.MR, cfg *config) vroce.SGE {
	if cfg.Duplex {
		return mr.SGE(mr.Len()/2, cfg.Size)
	}
	return mr.SGE(0, cfg.Size)
}

// pfPostRecvs posts on every QP the receives a send_bw server (or with
// -b, either end) keeps posted before the test starts.
func pfPostRecvs(qps []*vroce.QP, mr *vroce.MR, cfg *config) error {
	for _, qp := range qps {
		for i := range min(cfg.Iters, pfRecvs) {
			if err := qp.PostRecv(vroce.RecvWR{ID: uint64(i), SGL: []vroce.SGE{pfRecvSGE(mr, cfg)}}); err != nil {
				return err
			}
		}
	}
	return nil
}

// pfRun moves the test's messages on every QP at once and returns how
// many completed: the client's -n WRITEs, READs, SENDs or
// fetch-and-adds a QP, -t of them in flight, all to the start of the
// peer's buffer that QP was given (with -D, as many as it posted in
// that many seconds); a send_bw server's -n receives a QP, posted again
// as they complete while more are due. With send_bw -b each end does
// both, as perftest's run_iter_bi: the server sends only once its first
// receive has come, and pfRun counts what this end sent.
func pfRun(cfg *config, qps []*vroce.QP, cq *vroce.CQ, mr *vroce.MR, peers []pfKeys) (int, error) {
	op := vroce.WRRDMAWrite
	switch cfg.Test {
	case "read_bw":
		op = vroce.WRRDMARead
	case "send_bw":
		op = vroce.WRSend
	case "atomic_bw":
		op = vroce.WRAtomicFetchAndAdd
	}
	// With one QP the fetches come back in order from one word; with
	// more, the QPs' adds interleave there (the server checks the sum).
	var adds *fetchedSequence
	if op == vroce.WRAtomicFetchAndAdd && len(qps) == 1 {
		adds = &fetchedSequence{}
	}
	server := cfg.Server == ""
	receiving := cfg.Test == "send_bw" && (server || cfg.Duplex)
	sending := cfg.Test != "send_bw" || !server || cfg.Duplex
	sendsHeld := sending && receiving && server // until the first receive
	timed := cfg.RunFor > 0 && sending
	runFor := time.Duration(cfg.RunFor) * time.Second
	deadline := time.Now().Add(runFor)
	limit := time.Duration(cfg.Iters*len(qps))*time.Second + 30*time.Second
	if timed {
		limit = runFor + 30*time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	index := make(map[uint32]int, len(qps))
	sent, sendsDone, recvsDone := make([]int, len(qps)), make([]int, len(qps)), make([]int, len(qps))
	for i, qp := range qps {
		index[qp.QPN()] = i
	}
	// more says whether QP i posts another message.
	more := func(i int) bool {
		if timed {
			return time.Now().Before(deadline)
		}
		return sent[i] < cfg.Iters
	}
	wcs := make([]vroce.WorkCompletion, 64)
	sendsTotal, recvsTotal, inFlight := 0, 0, 0
	want := cfg.Iters * len(qps) // of each kind this end moves
	total := func() int {
		if sending {
			return sendsTotal
		}
		return recvsTotal
	}
	for {
		for i, qp := range qps {
			for sending && !sendsHeld && sent[i]-sendsDone[i] < cfg.TxDepth && more(i) {
				wr := vroce.SendWR{ID: uint64(sent[i]), Opcode: op, Flags: vroce.SendSignaled,
					SGL: []vroce.SGE{mr.SGE(0, cfg.Size)}, RemoteAddr: peers[i].vaddr, RKey: peers[i].rkey}
				if op == vroce.WRAtomicFetchAndAdd {
					wr.CompareAdd = 1
					if adds != nil {
						wr.SGL[0] = adds.slot(mr, sent[i])
					}
				}
				if err := qp.PostSend(wr); err != nil {
					return total(), err
				}
				sent[i]++
				inFlight++
			}
		}
		switch {
		case timed && inFlight == 0:
			return total(), nil
		case !timed && (!sending || sendsTotal == want) && (!receiving || recvsTotal == want):
			return total(), nil
		}
		n, err := cq.PollWait(ctx, wcs)
		if err != nil {
			return total(), fmt.Errorf("perftest: %d sent, %d received: %w (QP %v, %+v)", sendsTotal, recvsTotal, err, qps[0].State(), qps[0].Stats())
		}
		for _, wc := range wcs[:n] {
			i, ok := index[wc.QPN]
			isRecv := wc.Opcode == vroce.WCRecv
			switch {
			case !ok:
				return total(), fmt.Errorf("perftest: a completion names QPN %#x, none of ours", wc.QPN)
			case wc.Status != vroce.WCSuccess:
				return total(), fmt.Errorf("perftest: %v %d on QP %d failed: %v", wc.Opcode, wc.ID, i, wc.Status)
			case isRecv && !receiving:
				return total(), fmt.Errorf("perftest: QP %d received a message in a test that sends none to it", i)
			case isRecv && int(wc.ByteLen) != cfg.Size:
				return total(), fmt.Errorf("perftest: receive %d on QP %d brought %d bytes, want %d", recvsDone[i], i, wc.ByteLen, cfg.Size)
			}
			if !isRecv {
				if adds != nil {
					if err := adds.check(mr, int(wc.ID)); err != nil {
						return total(), err
					}
				}
				sendsDone[i]++
				sendsTotal++
				inFlight--
				continue
			}
			sendsHeld = false
			recvsDone[i]++
			recvsTotal++
			// pfPostRecvs posted pfRecvs first; one more for each done.
			if next := recvsDone[i] + pfRecvs - 1; next < cfg.Iters {
				if err := qps[i].PostRecv(vroce.RecvWR{ID: uint64(next), SGL: []vroce.SGE{pfRecvSGE(mr, cfg)}}); err != nil {
					return total(), err
				}
			}
		}
	}
}

// fetchedSequence checks a client's fetch-and-adds of 1, all at one
// word of the peer's: in order, the n-th brings back the first's value
// plus n. Each operation in flight fetches into its own 8-byte slot of
// the local buffer.
type fetchedSequence struct {
	first uint64
}

// slot is where operation n fetches into.
func (f *fetchedSequence) slot(mr *vroce.MR, n int) vroce.SGE {
	return mr.SGE(8*(n%(mr.Len()/8)), 8)
}

// check reads what operation n fetched, once it completed.
func (f *fetchedSequence) check(mr *vroce.MR, n int) error {
	s := f.slot(mr, n)
	got := binary.NativeEndian.Uint64(mr.Bytes()[s.Addr-mr.Addr():])
	if n == 0 {
		f.first = got
		return nil
	}
	if want := f.first + uint64(n); got != want {
		return fmt.Errorf("perftest: fetch-and-add %d brought back %#x, want %#x (the first brought %#x)", n, got, want, f.first)
	}
	return nil
}

// pfLatency runs the client of ib_read_lat or ib_atomic_lat: one READ or
// fetch-and-add at a time to the start of the peer's buffer, each timed
// from its post to its completion.
func pfLatency(cfg *config, qp *vroce.QP, cq *vroce.CQ, mr *vroce.MR, peer *pfKeys, mtu vroce.MTU) (*result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(cfg.Iters)*time.Second+30*time.Second)
	defer cancel()
	var adds fetchedSequence
	wcs := make([]vroce.WorkCompletion, 1)
	samples := make([]time.Duration, 0, cfg.Iters)
	start := time.Now()
	for i := range cfg.Iters {
		wr := vroce.SendWR{ID: uint64(i), Opcode: vroce.WRRDMARead, Flags: vroce.SendSignaled,
			SGL: []vroce.SGE{mr.SGE(0, cfg.Size)}, RemoteAddr: peer.vaddr, RKey: peer.rkey}
		if cfg.Test == "atomic_lat" {
			wr.Opcode, wr.SGL[0], wr.CompareAdd = vroce.WRAtomicFetchAndAdd, adds.slot(mr, i), 1
		}
		t0 := time.Now()
		if err := qp.PostSend(wr); err != nil {
			return nil, err
		}
		if _, err := cq.PollWait(ctx, wcs); err != nil {
			return nil, fmt.Errorf("perftest: %d of %d done: %w (QP %v, %+v)", i, cfg.Iters, err, qp.State(), qp.Stats())
		}
		samples = append(samples, time.Since(t0))
		if wcs[0].Status != vroce.WCSuccess {
			return nil, fmt.Errorf("perftest: %v %d failed: %v", wcs[0].Opcode, i, wcs[0].Status)
		}
		if cfg.Test == "atomic_lat" {
			if err := adds.check(mr, i); err != nil {
				return nil, err
			}
		}
	}
	r := &result{Test: cfg.Test, Provider: cfg.Provider, Bytes: cfg.Size, Iterations: cfg.Iters, QPs: 1, MTU: int(mtu), Verified: cfg.Test == "atomic_lat"}
	r.setLatency(samples, time.Since(start))
	return r, nil
}

// pfWriteLat plays either end of ib_write_lat (perftest's
// run_iter_lat_write): each end WRITEs -s bytes into the other's buffer,
// the last byte counting its messages, and spins on the last byte of its
// own buffer (poll) until the other's next count lands there. The server
// writes first. Each WRITE is signaled and waited for before the next
// wait, as perftest does. Both ends time the round trip between their
// own posts and report half of it.
func pfWriteLat(cfg *config, dev *vroce.Device, qp *vroce.QP, cq *vroce.CQ, mr *vroce.MR, poll *byte, peer *pfKeys, mtu vroce.MTU, server bool) (*result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(cfg.Iters)*time.Second+30*time.Second)
	defer cancel()
	sig := dev.NewSignal()
	count := &mr.Bytes()[cfg.Size-1] // of the message we send
	await := func(n int) error {
		if err := awaitByte(ctx, sig, poll, byte(n)); err != nil {
			return fmt.Errorf("perftest: waiting for the peer's WRITE %d of %d: %w (QP %v, %+v)", n, cfg.Iters, err, qp.State(), qp.Stats())
		}
		return nil
	}
	wcs := make([]vroce.WorkCompletion, 1)
	posts := make([]time.Time, 0, cfg.Iters)
	received := 0
	for sent := 1; sent <= cfg.Iters; sent++ {
		if !server || sent > 1 {
			received++
			if err := await(received); err != nil {
				return nil, err
			}
		}
		*count = byte(sent)
		posts = append(posts, time.Now())
		wr := vroce.SendWR{ID: uint64(sent), Opcode: vroce.WRRDMAWrite, Flags: vroce.SendSignaled,
			SGL: []vroce.SGE{mr.SGE(0, cfg.Size)}, RemoteAddr: peer.vaddr, RKey: peer.rkey}
		if err := qp.PostSend(wr); err != nil {
			return nil, err
		}
		if _, err := cq.PollWait(ctx, wcs); err != nil {
			return nil, fmt.Errorf("perftest: WRITE %d of %d: %w (QP %v, %+v)", sent, cfg.Iters, err, qp.State(), qp.Stats())
		}
		if wcs[0].Status != vroce.WCSuccess {
			return nil, fmt.Errorf("perftest: WRITE %d failed: %v", sent, wcs[0].Status)
		}
	}
	if received < cfg.Iters { // the server's last wait: the client's last WRITE
		if err := await(cfg.Iters); err != nil {
			return nil, err
		}
	}
	samples := make([]time.Duration, 0, len(posts))
	for i := 1; i < len(posts); i++ {
		samples = append(samples, posts[i].Sub(posts[i-1])/2)
	}
	r := &result{Test: cfg.Test, Provider: cfg.Provider, Bytes: cfg.Size, Iterations: cfg.Iters, QPs: 1, MTU: int(mtu)}
	r.setLatency(samples, time.Since(posts[0]))
	return r, nil
}
