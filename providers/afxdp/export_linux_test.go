package afxdp

// FrameAccount reports, for each socket, the receive frames in the fill
// and RX rings (as published, so the receiving goroutine may be between two
// steps) and the TX frames free: once traffic stops, every frame must be
// back, none lost.
func FrameAccount(p *Provider) (rxHeld, txFree []int) {
	p.sendMu.Lock()
	defer p.sendMu.Unlock()
	for _, s := range p.socks {
		s.reclaim()
		fill := s.fill.producer.Load() - s.fill.consumer.Load()
		rx := s.rx.producer.Load() - s.rx.consumer.Load()
		rxHeld = append(rxHeld, int(fill+rx))
		txFree = append(txFree, len(s.txFree))
	}
	return rxHeld, txFree
}

// Frames is how many frames each socket has for receiving and for sending.
const Frames = rxFrames
