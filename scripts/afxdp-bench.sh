#!/bin/sh
# AF_XDP against the UDP provider on the same veth pair between two network
# namespaces, in one run, each next to kernel TCP over the same veth:
# packet rate (send_bw, 64 B), bandwidth (write_bw, 64 KiB) and latency
# (send_lat, 64 B). Needs root, ip and ethtool.
# Usage: scripts/afxdp-bench.sh [bin/vroce-perf]
set -eu
perf=$(realpath "${1:-bin/vroce-perf}")
a=vroce-bench-a-$$ b=vroce-bench-b-$$
cleanup() { ip netns del $a 2>/dev/null || true; ip netns del $b 2>/dev/null || true; }
trap cleanup EXIT INT TERM
ip netns add $a
ip netns add $b
ip link add vbA netns $a type veth peer name vbB netns $b
for ns in $a $b; do
	dev=vbA ip=10.77.0.1
	[ $ns = $b ] && dev=vbB ip=10.77.0.2
	ip -n $ns addr add $ip/24 dev $dev
	# A veth hands over partially checksummed packets, which XDP sees as
	# they are; a NIC completes the checksum. So: no offload here.
	ip netns exec $ns ethtool -K $dev tx off >/dev/null
	ip -n $ns link set $dev up
	ip -n $ns link set lo up
done
port=18800
one() { # provider test args...
	provider=$1 test=$2
	shift 2
	port=$((port + 1))
	ip netns exec $a "$perf" "$test" --provider "$provider" --iface vbA --port $port --json >/dev/null &
	server=$!
	i=0
	until ip netns exec $b "$perf" "$test" --provider "$provider" --iface vbB --port $port --compare tcp --json "$@" 10.77.0.1 2>/dev/null; do
		i=$((i + 1)) # the server is not listening yet
		[ $i -lt 50 ] || { kill $server; exit 1; }
		sleep 0.1
	done
	wait $server
}
for provider in ${PROVIDERS:-afxdp udp}; do
	one $provider send_bw -s 64 -n 300000
	one $provider write_bw -s 65536 -n 8000
	one $provider send_lat -s 64 -n 5000
done
