package vroce

import (
	"fmt"
	"sync"
)

// recvWQE is a posted receive: where a SEND's data goes.
type recvWQE struct {
	id    uint64
	first span   // the first SGE, kept inline: most receives have one
	more  []span // the rest
	total int
}

// recvRing is a FIFO of receive WQEs that grows as it fills, up to max.
type recvRing struct {
	q       []recvWQE
	head, n int
	max     int
}

func (r *recvRing) push(w recvWQE) bool {
	if r.n == r.max {
		return false
	}
	if r.n == len(r.q) {
		q := make([]recvWQE, min(max(2*len(r.q), 4), r.max))
		for i := 0; i < r.n; i++ {
			q[i] = r.q[(r.head+i)%len(r.q)]
		}
		r.q, r.head = q, 0
	}
	r.q[(r.head+r.n)%len(r.q)] = w
	r.n++
	return true
}

func (r *recvRing) pop() (recvWQE, bool) {
	if r.n == 0 {
		return recvWQE{}, false
	}
	w := r.q[r.head]
	r.q[r.head] = recvWQE{}
	r.head = (r.head + 1) % len(r.q)
	r.n--
	return w, true
}

// resolveRecv validates a receive work request against pd.
func resolveRecv(d *Device, pd *PD, wr *RecvWR, maxSGE int, op string) (recvWQE, error) {
	if err := checkLimit(op, "max_recv_sge", len(wr.SGL), maxSGE); err != nil {
		return recvWQE{}, err
	}
	w := recvWQE{id: wr.ID}
	for i, sge := range wr.SGL {
		s, ok := d.lookupLocal(sge.LKey, pd, AccessLocalWrite, sge.Addr, uint64(sge.Length))
		if !ok {
			return recvWQE{}, invalidf("%s: SGE %d (lkey %#x, addr %#x, length %d) is not writable registered memory of this PD", op, i, sge.LKey, sge.Addr, sge.Length)
		}
		if i == 0 {
			w.first = s
		} else {
			w.more = append(w.more, s)
		}
		w.total += s.n
	}
	return w, nil
}

// SRQ is a shared receive queue (ibv_srq): one pool of receive WQEs that
// many QPs draw from.
type SRQ struct {
	pd     *PD
	maxSGE int

	mu    sync.Mutex
	ring  recvRing
	limit int // srq_limit: EventSRQLimitReached when fewer remain; 0 = disarmed
	users int
	gone  bool
}

// SRQAttr sizes a shared receive queue.
type SRQAttr struct {
	MaxWR  int
	MaxSGE int
	Limit  int // srq_limit, 0 to leave disarmed
}

// CreateSRQ creates a shared receive queue.
func (pd *PD) CreateSRQ(attr SRQAttr) (*SRQ, error) {
	d := pd.dev
	const op = "create SRQ"
	if attr.MaxWR < 1 || attr.MaxSGE < 0 || attr.Limit < 0 {
		return nil, invalidf("%s: max_wr %d, max_sge %d, limit %d", op, attr.MaxWR, attr.MaxSGE, attr.Limit)
	}
	if err := checkLimit(op, "max_srq_wr", attr.MaxWR, d.attr.MaxSRQWR); err != nil {
		return nil, err
	}
	if err := checkLimit(op, "max_srq_sge", attr.MaxSGE, d.attr.MaxSRQSGE); err != nil {
		return nil, err
	}
	if attr.Limit > attr.MaxWR {
		return nil, invalidf("%s: srq_limit %d above max_wr %d", op, attr.Limit, attr.MaxWR)
	}
	if err := pd.use(); err != nil {
		return nil, err
	}
	if err := d.reserve(op, "max_srq", &d.count.srq, d.attr.MaxSRQ); err != nil {
		pd.refs.Add(-1)
		return nil, err
	}
	return &SRQ{pd: pd, maxSGE: max(attr.MaxSGE, 1), ring: recvRing{max: attr.MaxWR}, limit: attr.Limit}, nil
}

// PostRecv posts receive work requests (ibv_post_srq_recv). On error the
// requests before the bad one are posted and the error says which failed.
func (s *SRQ) PostRecv(wrs ...RecvWR) error {
	for i := range wrs {
		w, err := resolveRecv(s.pd.dev, s.pd, &wrs[i], s.maxSGE, "post SRQ recv")
		if err != nil {
			return fmt.Errorf("work request %d: %w", i, err)
		}
		s.mu.Lock()
		if s.gone {
			s.mu.Unlock()
			return ErrClosed
		}
		ok := s.ring.push(w)
		s.mu.Unlock()
		if !ok {
			return fmt.Errorf("vroce: post SRQ recv: work request %d: %d outstanding: %w", i, s.ring.max, ErrQueueFull)
		}
	}
	return nil
}

// Arm sets srq_limit (ibv_modify_srq with IBV_SRQ_LIMIT): when fewer than
// limit receives remain, the device reports EventSRQLimitReached once and
// disarms.
func (s *SRQ) Arm(limit int) error {
	if limit < 0 || limit > s.ring.max {
		return invalidf("modify SRQ: srq_limit %d out of range 0-%d", limit, s.ring.max)
	}
	s.mu.Lock()
	s.limit = limit
	s.mu.Unlock()
	return nil
}

// Len is the number of posted receives not yet consumed.
func (s *SRQ) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ring.n
}

func (s *SRQ) pop() (recvWQE, bool) {
	s.mu.Lock()
	w, ok := s.ring.pop()
	fire := ok && s.limit > 0 && s.ring.n < s.limit
	if fire {
		s.limit = 0
	}
	s.mu.Unlock()
	if fire {
		s.pd.dev.events.push(AsyncEvent{Type: EventSRQLimitReached, SRQ: s})
	}
	return w, ok
}

// Destroy frees the SRQ; it fails with ErrBusy while QPs use it.
func (s *SRQ) Destroy() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gone {
		return ErrClosed
	}
	if s.users > 0 {
		return fmt.Errorf("vroce: destroy SRQ: %d QPs still use it: %w", s.users, ErrBusy)
	}
	s.gone = true
	s.ring = recvRing{}
	s.pd.dev.events.drop(nil, func(ev AsyncEvent) bool { return ev.SRQ == s })
	s.pd.dev.release(&s.pd.dev.count.srq)
	s.pd.refs.Add(-1)
	return nil
}
