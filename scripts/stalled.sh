#!/bin/sh
# Runs a command that a hypervisor keeps taking the CPU from: the command
# is stopped (SIGSTOP) for STOP_MS of every PERIOD_MS until it exits.
# Nothing it was sent is lost meanwhile; it just does not run, as a
# guest's vCPU does not while its host runs another's. Run a receiving
# vroce-perf (or a TCP one) under it to see what a sender makes of a
# receiver that stalls (docs/performance-history.md, 2026-12-03).
# Usage: scripts/stalled.sh STOP_MS PERIOD_MS COMMAND [ARG...]
# For example, the server end of a stream between two namespaces:
#   ip netns exec va scripts/stalled.sh 10 100 bin/vroce-perf stream_bw -s 65536 -n 10000
set -eu
[ $# -ge 3 ] || { echo "usage: $0 STOP_MS PERIOD_MS COMMAND [ARG...]" >&2; exit 2; }
stop=$1 period=$2
shift 2
[ "$stop" -ge 0 ] && [ "$period" -gt "$stop" ] || { echo "$0: want 0 <= STOP_MS < PERIOD_MS" >&2; exit 2; }
"$@" &
cmd=$!
trap 'kill -CONT $cmd 2>/dev/null || true' EXIT
on=$(awk "BEGIN { print $stop / 1000 }")
off=$(awk "BEGIN { print ($period - $stop) / 1000 }")
(
	while kill -0 $cmd 2>/dev/null; do
		if [ "$stop" -gt 0 ]; then
			kill -STOP $cmd 2>/dev/null || break
			sleep "$on"
			kill -CONT $cmd 2>/dev/null || break
		fi
		sleep "$off"
	done
) &
staller=$!
status=0
wait $cmd || status=$?
kill $staller 2>/dev/null || true
exit $status
