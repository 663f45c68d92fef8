module vroce.dev/bench/quic

go 1.26.0

// The stream workloads are vroce-perf's own (vroce.dev/internal/workload),
// from this checkout.
replace vroce.dev => ../..

require vroce.dev v0.0.0-00010101000000-000000000000

require (
	github.com/quic-go/quic-go v0.65.0
	go.uber.org/goleak v1.3.0
)

require (
	golang.org/x/crypto v0.58.0 // indirect
	golang.org/x/net v0.62.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
)
