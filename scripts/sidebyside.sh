#!/usr/bin/env bash
# Side by side on the lease-lifecycle workload (docs/workload.md: N jobs, W
# workers, 3 heartbeats a job): per round and per W (WS), `leaselog bench` as
# a user runs it — no --protocol: the worker session, plain HTTP if the
# upgrade is refused — and with each protocol of PROTOS, each run on a fresh
# daemon; and, optional, the peer of that W (asynq at W=1, embedded etcd
# otherwise) from the peers harness, when PEERS names its checkout (it is
# not part of this repository: without it the script measures leaselog
# alone). The order within a round rotates each round, because a run pays
# for the disk writeback of the one before it. One line a run:
# "round W who transport jobs/s heartbeat-p50 p99" (transport: what the
# workers' calls went over, http1 or http1+session; "-" for a peer).
#
#   scripts/sidebyside.sh                        # leaselog only: 3 rounds, N=20000
#   PEERS=/path/to/peers scripts/sidebyside.sh   # with etcd and asynq (asynq needs redis-server)
#   R=1 N=2000 scripts/sidebyside.sh             # a quick look
#   WS=1 PROTOS="session http" scripts/sidebyside.sh
set -euo pipefail
R=${R:-3}; N=${N:-20000}; WS=${WS:-1 64}; PROTOS=${PROTOS:-http}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PEERS=${PEERS:-}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
go -C "$ROOT" build -o "$WORK/leaselog" ./cmd/leaselog
L=$WORK/leaselog
if [ -n "$PEERS" ]; then
	cp -r "$PEERS" "$WORK/peers"
	rm -rf "$WORK/peers/.data" "$WORK/peers/results"
	(cd "$WORK/peers" && go build -o peers .)
fi

leaselog() { # W protocol ("default": no --protocol)
	local d port=17431 proto=()
	[ "$2" != default ] && proto=(--protocol "$2")
	d=$(mktemp -d "$WORK/data.XXXX")
	"$L" serve --open --data "$d" --local-capacity 0 --listen 127.0.0.1:$port >"$WORK/serve.log" 2>&1 &
	local sp=$!
	for _ in $(seq 50); do curl -sf 127.0.0.1:$port/healthz >/dev/null && break; sleep 0.1; done
	"$L" bench --server http://127.0.0.1:$port --jobs "$N" --workers "$1" "${proto[@]}" -o json >"$WORK/b.json"
	kill $sp; wait $sp 2>/dev/null || true; rm -rf "$d"
	python3 -c "import json;d=json.load(open('$WORK/b.json'));h=d['heartbeat_ms'];print(d['http'],round(d['jobs_per_second']),h['p50'],h['p99'])"
}
peer() { # name W
	(cd "$WORK/peers" && ./peers -peers "$1" -n "$N" -w "$2" -runs 1 -out "$WORK/results" 2>>"$WORK/peers.err" |
		awk -F'|' '/\| (etcd|asynq-redis) /{gsub(/\([^)]*\)/,""); print "-", $5+0, $7+0, $8+0}')
}
for r in $(seq "$R"); do
	for W in $WS; do
		p=etcd; [ "$W" = 1 ] && p=asynq
		who=(default $PROTOS)
		[ -n "$PEERS" ] && who+=("$p")
		for i in $(seq 0 $((${#who[@]} - 1))); do
			x=${who[$(((i + r - 1) % ${#who[@]}))]}
			if [ "$x" = "$p" ]; then
				echo "$r $W $p $(peer "$p" "$W")"
			else
				echo "$r $W leaselog-$x $(leaselog "$W" "$x")"
			fi
		done
	done
done
