#!/bin/sh
# Measures a ping-pong's CPU a round trip in steady state: a window in
# the middle of a long vroce-perf run, with neither end's setup (a TCP
# exchange, QP creation) nor its close inside it, as whole-run profiles
# have (docs/performance-history.md, 2026-12-04, a seventh session).
# Both ends run on one CPU in two namespaces; the round trips are counted
# by their sendto calls, one each way (a 64-byte message is one packet).
# Prints the CPU a round trip, the system calls and context switches a
# round trip, and user space's share; leaves the profile in OUT.data.
# Usage: scripts/steady-window.sh PERF SERVER_NS CLIENT_NS SERVER_IP TEST [CPU [OUT]]
# For example, a stream's and a verbs ping-pong in turn:
#   scripts/steady-window.sh bin/vroce-perf va vb 10.9.0.1 stream_lat
#   scripts/steady-window.sh bin/vroce-perf va vb 10.9.0.1 send_lat
set -eu
[ $# -ge 5 ] || { echo "usage: $0 PERF SERVER_NS CLIENT_NS SERVER_IP TEST [CPU [OUT]]" >&2; exit 2; }
perf=$(realpath "$1") sns=$2 cns=$3 ip=$4 test=$5 cpu=${6:-0} out=${7:-/tmp/steady-$5}
port=$((20000 + $$ % 5000))
ip netns exec "$sns" taskset -c "$cpu" "$perf" "$test" --port $port >/dev/null 2>&1 &
server=$!
trap 'kill $server $client 2>/dev/null || true' EXIT
client=
for _ in $(seq 50); do
	ip netns exec "$sns" ss -Hltn "sport = :$port" | grep -q . && break
	sleep 0.1
done
ip netns exec "$cns" taskset -c "$cpu" "$perf" "$test" --port $port -s 64 -n 1000000 "$ip" >/dev/null 2>&1 &
client=$!
sleep 1.5
perf record -q -F 4999 -g -a -C "$cpu" -o "$out.data" -- sleep 3 2>/dev/null
perf stat -x, -a -C "$cpu" -o "$out.stat" \
	-e syscalls:sys_enter_sendto,syscalls:sys_enter_recvmmsg,syscalls:sys_enter_epoll_pwait,context-switches,cpu-clock -- sleep 2
kill -0 $client 2>/dev/null || { echo "$0: the client ended before the window did" >&2; exit 1; }
user=$(perf report -i "$out.data" --no-children --sort dso -g none 2>/dev/null | awk '!/^#/ && !/kernel/ && /%/ { s += $1 } END { print s }')
awk -F, -v test="$test" -v user="$user" '
	$3 ~ /sendto/ { rt = $1 / 2 } { v[$3] = $1 }
	END {
		if (rt == 0) { print test ": no round trips in the window"; exit 1 }
		printf "%s: %.1f us of CPU a round trip (%.0f%% user space); a round trip: %.2f context switches, %.2f recvmmsg, %.2f epoll_pwait\n",
			test, v["cpu-clock"] * 1000 / rt, user, v["context-switches"] / rt, v["syscalls:sys_enter_recvmmsg"] / rt, v["syscalls:sys_enter_epoll_pwait"] / rt
	}' "$out.stat"
