#!/bin/sh
# Every fuzz target of every package for FUZZTIME each (make fuzz). What
# widened coverage goes from Go's cache into the package's testdata/fuzz,
# where every `go test` runs it again; a failing input is written there
# too, and fails the run.
#
# One failure is not a finding: Go's fuzzing coordinator can miss its own
# -fuzztime deadline while a worker is busy (golang/go#75804, fixed in
# Go 1.27) and report "context deadline exceeded" having written no
# input. That alone is reported and passed over.
# Usage: scripts/fuzz.sh [FUZZTIME]
set -u
go=${GO:-go}
fuzztime=${1:-30s}
cache=$("$go" env GOCACHE)/fuzz
for pkg in $("$go" list ./...); do
	dir=$("$go" list -f '{{.Dir}}' "$pkg")
	for t in $("$go" test -list '^Fuzz' "$pkg" | grep '^Fuzz'); do
		echo "== $pkg $t"
		corpus="$dir/testdata/fuzz/$t"
		before=$(ls "$corpus" 2>/dev/null)
		out=$("$go" test -run '^$' -fuzz "^$t\$" -fuzztime "$fuzztime" "$pkg" 2>&1)
		rc=$?
		if [ $rc -ne 0 ]; then
			if [ "$(ls "$corpus" 2>/dev/null)" = "$before" ] &&
				printf '%s\n' "$out" | grep -qx '    context deadline exceeded' &&
				! printf '%s\n' "$out" | grep -q 'Failing input written'; then
				echo "   Go's coordinator missed its deadline (golang/go#75804); no failing input: not a finding"
			else
				printf '%s\n' "$out"
				exit 1
			fi
		else
			printf '%s\n' "$out" | tail -n 1
		fi
		if [ -d "$cache/$pkg/$t" ]; then
			mkdir -p "$corpus" && cp "$cache/$pkg/$t"/* "$corpus/"
		fi
	done
done
