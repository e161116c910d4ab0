#!/bin/sh
# Runs every fuzz target of the module, one after the other, each for
# $FUZZTIME (default 30s), and prints one line per target. A target that
# fails leaves its failing input in its package's testdata/fuzz/<Target>/,
# where every later `go test` runs it again: keep it as a regression entry
# once the bug is fixed. Exits non-zero if any target failed.
#
#   scripts/fuzz.sh                      # every target under ./...
#   FUZZTIME=10m scripts/fuzz.sh ./server
#
# FUZZMINIMIZETIME (default 5s) bounds the minimizing of each new
# interesting input and of a failing one. Go's default, 60s, spends most of
# a short run minimizing on a 2-core machine: FuzzDecode made 17,750 execs in
# 20s with it, 76,937 with 2s.
set -eu

cd "$(dirname "$0")/.."
GO=${GO:-go}
FUZZTIME=${FUZZTIME:-30s}
FUZZMINIMIZETIME=${FUZZMINIMIZETIME:-5s}
[ "$#" -gt 0 ] || set -- ./...

logs=$(mktemp -d "${TMPDIR:-/tmp}/leaselog-fuzz.XXXXXX")
targets=$logs/targets

# `go test -list` prints a package's matching names, then its "ok" line.
if ! "$GO" test -list '^Fuzz' "$@" >"$logs/list" 2>&1; then
	cat "$logs/list" >&2
	echo "fuzz: cannot list the fuzz targets" >&2
	exit 1
fi
awk '/^Fuzz/ { names[n++] = $1; next }
     /^ok /  { for (i = 0; i < n; i++) print $2, names[i]; n = 0 }' "$logs/list" >"$targets"
if [ ! -s "$targets" ]; then
	echo "fuzz: no fuzz targets in $*" >&2
	exit 1
fi

# seconds turns Go's elapsed time (1h2m3s, 1m0s, 45s) into seconds.
seconds() {
	echo "$1" | awk '{ s = 0; t = $0
		if (match(t, /[0-9]+h/)) s += substr(t, RSTART, RLENGTH - 1) * 3600
		if (match(t, /[0-9]+m/)) s += substr(t, RSTART, RLENGTH - 1) * 60
		if (match(t, /[0-9.]+s/)) s += substr(t, RSTART, RLENGTH - 1)
		print s }'
}

module=$("$GO" list -m)
failed=0
total=$(wc -l <"$targets")
echo "fuzz: $total targets, $FUZZTIME each (minimizing ${FUZZMINIMIZETIME} at most); logs in $logs"
while read -r pkg name; do
	log=$logs/$(echo "$pkg" | tr / _).$name.log
	rel=${pkg#"$module"}
	rel=.${rel:-/}
	if "$GO" test -run '^$' -fuzz "^$name\$" -fuzztime "$FUZZTIME" -fuzzminimizetime "$FUZZMINIMIZETIME" "$pkg" >"$log" 2>&1; then
		status=PASS
	else
		status=FAIL
		failed=$((failed + 1))
	fi
	# The last progress line: "fuzz: elapsed: 30s, execs: 123 (4/sec), new interesting: 5 (total: 9)"
	last=$(grep '^fuzz: elapsed: .*execs:' "$log" | tail -n 1 || true)
	elapsed=$(echo "$last" | sed -n 's/^fuzz: elapsed: \([^,]*\),.*/\1/p')
	execs=$(echo "$last" | sed -n 's/.*execs: \([0-9]*\).*/\1/p')
	found=$(echo "$last" | sed -n 's/.*new interesting: \([0-9]*\).*/\1/p')
	rate=-
	if [ -n "$execs" ] && [ -n "$elapsed" ]; then
		rate=$(awk -v e="$execs" -v s="$(seconds "$elapsed")" 'BEGIN { if (s > 0) printf "%d", e / s; else print "-" }')
	fi
	printf '%s  %-22s %-28s execs=%-9s %6s/s  new-interesting=%s\n' \
		"$status" "$rel" "$name" "${execs:--}" "$rate" "${found:--}"
	if [ "$status" = FAIL ]; then
		input=$(sed -n 's/.*Failing input written to \(.*\)$/\1/p' "$log" | tail -n 1)
		if [ -n "$input" ]; then
			echo "      failing input: $rel/$input"
			echo "      replay it:     $GO test -run '^$name/$(basename "$input")\$' $rel"
		fi
		echo "      log: $log"
		grep -v '^fuzz: elapsed' "$log" | head -n 40 | sed 's/^/      | /'
	fi
done <"$targets"

if [ "$failed" -gt 0 ]; then
	echo "fuzz: $failed of $total targets failed"
	exit 1
fi
echo "fuzz: all $total targets passed"
