# vroce.dev: `make demo` runs the demo, `make test` runs the tests.
GO        ?= go
CC        ?= cc
FUZZTIME  ?= 30s
BIN       := bin

.PHONY: all build test vet lint fmt-check demo bench bench-page bench-targets bench-plugin bench-programs bench-preload bench-scale bench-afxdp interop fuzz clean

all: build

build:
	CGO_ENABLED=0 $(GO) build ./...
	CGO_ENABLED=0 $(GO) build -o $(BIN)/vroce-perf ./cmd/vroce-perf
	CGO_ENABLED=0 $(GO) build -o $(BIN)/rsock-proxy ./cmd/rsock-proxy
	CGO_ENABLED=0 $(GO) build -o $(BIN)/vroce-provider-udp ./cmd/vroce-provider-udp
	CGO_ENABLED=0 $(GO) build -o $(BIN)/vroce-provider-afxdp ./cmd/vroce-provider-afxdp
	CGO_ENABLED=0 $(GO) build -o $(BIN)/vroced ./cmd/vroced
	CGO_ENABLED=0 $(GO) build -o $(BIN)/vroce-run ./cmd/vroce-run
	$(CC) -shared -fPIC -O2 -Wall -Wextra -Werror -o $(BIN)/libvroce-preload.so preload/c/vroce-preload.c -ldl -lpthread
	CGO_ENABLED=0 $(GO) build -o $(BIN)/http-over-vroce ./examples/http-over-vroce
	CGO_ENABLED=0 $(GO) build -o $(BIN)/grpc-over-vroce ./examples/grpc-over-vroce
	cd bench/quic && CGO_ENABLED=0 $(GO) build -o ../../$(BIN)/quic-perf .

# bench/quic is a module of its own (quic-go stays out of vroce.dev's
# dependencies): ./... does not reach it.
vet:
	CGO_ENABLED=0 $(GO) vet ./...
	cd bench/quic && $(GO) vet ./...

# staticcheck over both modules, when it is installed (.ci/run installs
# it: go install honnef.co/go/tools/cmd/staticcheck@v0.8.2); elsewhere it
# says it was skipped.
STATICCHECK ?= $(shell command -v staticcheck || echo $(HOME)/go/bin/staticcheck)
lint:
	@if [ -x "$(STATICCHECK)" ]; then \
	  $(STATICCHECK) ./... && cd bench/quic && $(STATICCHECK) ./...; \
	else echo "staticcheck not installed: skipped (go install honnef.co/go/tools/cmd/staticcheck@v0.8.2)"; fi

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

# Every test with the race detector, fuzz seed corpora included; then the
# allocation checks again without it, where sync.Pool keeps what it is
# given and "no allocation per packet or message" means zero; then the
# wire codec with its assembly off (purego), as on CPUs without it; then
# the rdma_rxe interop matrix (root and qemu; 80-100 s with the guest
# built, 25 s more to build it), on its own: its TCG guest would take a
# core from the timing of the tests beside it.
test: fmt-check vet lint build
	$(GO) test -race -count=1 -timeout 12m $$($(GO) list ./... | grep -v /interop/)
	cd bench/quic && $(GO) test -race -count=1 ./...
	$(GO) test -count=1 -run 'NoAllocation' ./...
	$(GO) test -count=1 -tags purego ./vroce/wire
	$(GO) test -count=1 -timeout 8m ./interop/...

# The rdma_rxe interop matrix on a freshly built guest, every exchange's
# output shown (root, qemu-system-x86, busybox-static, cpio, kmod).
interop:
	VROCE_RXE_REBUILD=1 $(GO) test -count=1 -v -timeout 10m ./interop/...

# The demo: HTTP and gRPC services over vRoCE (UDP on loopback), then the
# verbs, each next to kernel TCP in the same run. Under a minute.
demo: build
	@echo "== HTTP/1.1 and HTTP/2: net/http over rsock, then over kernel TCP"
	$(BIN)/http-over-vroce -requests 2000 -concurrency 8
	@echo
	@echo "== gRPC: every kind of call and the health service over rsock, then over kernel TCP"
	$(BIN)/grpc-over-vroce -calls 2000 -concurrency 8
	@echo
	@echo "== verbs: RDMA WRITE bandwidth, 64 KiB messages, 256 MiB, every byte verified"
	$(BIN)/vroce-perf write_bw --loopback --provider udp --verify -s 65536 -n 4096 --compare tcp
	@echo
	@echo "== verbs: SEND latency, 64-byte ping-pong"
	$(BIN)/vroce-perf send_lat --loopback --provider udp -s 64 -n 5000 --compare tcp

# Benchmarks: testing.B (the lossy-network targets among them), then
# vroce-perf against TCP in the same run.
bench: build
	$(GO) test -run '^$$' -bench . -benchmem ./vroce/wire
	$(GO) test -run '^$$' -bench 'WriteGoodput|SendLatency' -benchtime 2000x ./vroce
	$(GO) test -run '^$$' -bench 'TwoQPs' -benchtime 2000x ./vroce
	$(GO) test -run '^$$' -bench 'PingPong64' -benchtime 20000x ./providers/udp
	$(BIN)/vroce-perf write_bw --loopback -s 65536 -n 20000 --compare tcp
	$(BIN)/vroce-perf send_bw --loopback -s 64 -n 200000 --compare tcp
	$(BIN)/vroce-perf send_lat --loopback -s 64 -n 10000 --compare tcp
	$(BIN)/vroce-perf read_lat --loopback -s 64 -n 10000 --compare tcp
	$(GO) test -run '^$$' -bench 'Stream' -benchtime 2s ./rsock
	$(BIN)/vroce-perf stream_bw --loopback -s 65536 -n 20000 --compare tcp
	$(BIN)/vroce-perf stream_lat --loopback -s 64 -n 10000 --compare tcp
	$(BIN)/quic-perf stream_bw -s 65536 -n 20000
	$(BIN)/quic-perf stream_lat -s 64 -n 10000

# The results page: bench/README.md and its plots, vRoCE against kernel
# TCP. The benchmark of record runs between two processes in two network
# namespaces over a veth pair, at MTU 1500 and 9000 (root, ip, taskset), each
# end on a CPU of its own; loopback in one process follows as a secondary
# view, the streams against quic-go too (about four minutes).
# BENCH_FLAGS=-loopback-only for loopback alone.
bench-page: build
	$(GO) run ./bench/page -perf $(BIN)/vroce-perf -quic $(BIN)/quic-perf -out bench $(BENCH_FLAGS)

# The two-host targets (issue 20) between two namespaces over veth at MTU
# 1500 and 9000, and goodput under 1% and 5% random loss each way
# (nftables), each run RUNS times in each placement (both ends pinned with
# taskset, both transports alike: on one CPU, then a CPU each): every
# run's figure, the spread, the median against the target, the bandwidth
# runs' sender CPU a GiB against TCP's, and the steal during each run
# (root, ip, nft, taskset; about eight minutes at 3).
RUNS ?= 3
bench-targets: build
	$(GO) run ./bench/page -perf $(BIN)/vroce-perf -targets -runs $(RUNS)

# A provider out of process (issue 22): write_bw, stream_bw and send_lat
# over plugin:udp against the udp provider in process, between two
# namespaces over veth at MTU 1500 and 9000, RUNS times (root, ip).
bench-plugin: build
	$(GO) run ./bench/page -perf $(BIN)/vroce-perf -plugin -runs $(RUNS)

# Unmodified programs through two rsock-proxys against the same chain of
# proxies over kernel TCP: redis-benchmark SET and GET, iperf3, nginx + wrk
# at 2, 32 and 200 connections, a 1 KiB echo at 8 to 3,000 connections,
# each chain data-checked first, RUNS times; then the echo over the vRoCE
# chain alone at 10,000 streams against 200, timed once every stream is
# up, its setup time beside (a flat cost per request is 1x). As root the
# servers and the clients sit in two namespaces over veth (MTU 1500), each
# side on a CPU of its own, else on loopback (redis-server redis-tools iperf3 nginx-light wrk; about
# four minutes at 2).
bench-programs: build
	$(GO) run ./bench/programs -proxy $(BIN)/rsock-proxy -runs $(RUNS)

# Issue 23's targets: the same programs under vroce-run, both ends
# interposed, beside the rsock-proxy pair, the TCP proxy chain and
# vroce-perf's streams, in one run (root: between two namespaces).
bench-preload: build
	$(GO) run ./bench/programs -preload -proxy $(BIN)/rsock-proxy -vroce-run $(BIN)/vroce-run -perf $(BIN)/vroce-perf -runs $(RUNS)

# Connection scale: 262,144 RC QPs by RDMA_CM between two processes, and
# 10,000 through the default backlog (about a minute).
bench-scale: build
	scripts/conn-scale.sh $(BIN)/vroce-perf

# AF_XDP against the UDP provider on one veth pair between two network
# namespaces, each next to kernel TCP: packet rate, bandwidth, latency.
# Needs root, ip and ethtool (about half a minute).
bench-afxdp: build
	scripts/afxdp-bench.sh $(BIN)/vroce-perf

# Run every fuzz target for FUZZTIME each, and keep what it found: the
# inputs that widened coverage go from Go's cache into the package's
# testdata/fuzz, where every `go test` runs them again (commit them; a
# file is named for its content, so copying one twice changes nothing).
fuzz:
	GO=$(GO) scripts/fuzz.sh $(FUZZTIME)

clean:
	rm -rf $(BIN)
