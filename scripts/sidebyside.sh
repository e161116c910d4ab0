#!/usr/bin/env bash
# Side by side on the lease-lifecycle workload (docs/workload.md):
# per round, W=1 asynq against `leaselog bench --protocol session`, then W=64
# etcd against it, each leaselog run on a fresh daemon; the order within a
# pair flips each round, because a run pays for the disk writeback of the
# one before it. One line a run: "round W who jobs/s heartbeat-p50 p99".
#
#   scripts/sidebyside.sh            # 5 rounds, N=20000 (about 12 minutes)
#   R=1 N=2000 scripts/sidebyside.sh # a quick look
#   WS=1 scripts/sidebyside.sh       # one worker only (WS: the W values)
#
# The peers harness (etcd, asynq and leaselog on the same workload) is not
# part of this repository, and is optional: leaselog builds and tests without
# it, and only this script and docs/performance.md's side-by-side figures use
# it. PEERS is its checkout (default ../shared/peers beside the repository,
# copied and built in a temporary directory); asynq needs redis-server on the
# PATH.
set -euo pipefail
R=${R:-5}; N=${N:-20000}; WS=${WS:-1 64}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PEERS=${PEERS:-$ROOT/../shared/peers}
if [ ! -d "$PEERS" ]; then
	echo "sidebyside: no peers harness at $PEERS (optional, not part of this repository): set PEERS to its checkout" >&2
	exit 2
fi
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cp -r "$PEERS" "$WORK/peers"
(cd "$WORK/peers" && go build -o peers .)
go -C "$ROOT" build -o "$WORK/leaselog" ./cmd/leaselog
L=$WORK/leaselog

leaselog() { # W
	local d port=17431
	d=$(mktemp -d "$WORK/data.XXXX")
	"$L" serve --open --data "$d" --local-capacity 0 --listen 127.0.0.1:$port >"$WORK/serve.log" 2>&1 &
	local sp=$!
	for _ in $(seq 50); do curl -sf 127.0.0.1:$port/healthz >/dev/null && break; sleep 0.1; done
	"$L" bench --server http://127.0.0.1:$port --jobs "$N" --workers "$1" --protocol session -o json >"$WORK/b.json"
	kill $sp; wait $sp 2>/dev/null || true; rm -rf "$d"
	python3 -c "import json;d=json.load(open('$WORK/b.json'));h=d['heartbeat_ms'];print(round(d['jobs_per_second']),h['p50'],h['p99'])"
}
peer() { # name W
	(cd "$WORK/peers" && ./peers -peers "$1" -n "$N" -w "$2" -runs 1 -out "$WORK/results" 2>>"$WORK/peers.err" |
		awk -F'|' '/\| (etcd|asynq-redis) /{gsub(/\([^)]*\)/,""); print $5+0, $7+0, $8+0}')
}
for r in $(seq "$R"); do
	for W in $WS; do
		p=asynq; [ "$W" = 64 ] && p=etcd
		order="$p leaselog"; [ $((r % 2)) = 0 ] && order="leaselog $p"
		for who in $order; do
			if [ "$who" = leaselog ]; then echo "$r $W leaselog $(leaselog "$W")"; else echo "$r $W $p $(peer "$p" "$W")"; fi
		done
	done
done
