#!/bin/sh
# The connection-scale runs: RC QPs connected by RDMA_CM between two
# vroce-perf processes on this host, each end measuring its own memory.
#   262,144 QPs through a 65,536 backlog (the largest instance), then
#   10,000 QPs through the default backlog of 1,024 (4,096 connects in
#   flight, so the backlog overflows and clients retry).
# Usage: scripts/conn-scale.sh [bin/vroce-perf]
set -eu
perf=${1:-bin/vroce-perf}
run() { # qps backlog port
	"$perf" conn_rate --port "$3" --backlog "$2" --dev-addr 127.0.0.1:"$3" --json >/dev/null &
	server=$!
	i=0
	until "$perf" conn_rate --qps "$1" --backlog "$2" --port "$3" 127.0.0.1 2>/dev/null; do
		i=$((i + 1)) # the server is not listening yet
		[ $i -lt 50 ] || { kill $server; exit 1; }
		sleep 0.1
	done
	wait $server
}
run 262144 65536 18620
run 10000 1024 18621
