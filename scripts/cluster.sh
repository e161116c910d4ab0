#!/bin/sh
# make cluster: three NATS servers forming one JetStream cluster and two
# leaselog daemons on the stream (one active, one standby), on this machine,
# from the Go modules alone (no containers). docs/cluster.md.
#
#   CLUSTER_DIR  where everything lives (default: a new temporary directory)
#   PORT         the first of the ports used (default 14222): NATS clients
#                PORT..PORT+2, routes PORT+10..PORT+12, daemons PORT+20, PORT+21,
#                NATS monitoring PORT+30..PORT+32
#
# Ctrl-C stops them all: the daemons first (a daemon's stop appends its last
# events to the stream, which needs NATS), then NATS. Each runs in a session
# of its own (setsid), so that the terminal's ^C reaches this script alone and
# not all of them at once. Kill the active daemon (its pid is printed) and the
# standby takes over within grace; kill a NATS server and appends go on.
set -eu
cd "$(dirname "$0")/.." # the module: go install and go build run in it
GO=${GO:-go}
dir=${CLUSTER_DIR:-$(mktemp -d -t leaselog-cluster.XXXXXX)}
port=${PORT:-14222}
mkdir -p "$dir/bin"
echo "building nats-server and leaselog into $dir/bin"
GOBIN="$dir/bin" $GO install github.com/nats-io/nats-server/v2@v2.15.3
$GO build -o "$dir/bin/leaselog" ./cmd/leaselog

nats_pids=""
daemon_pids=""
stop() {
	trap - INT TERM EXIT
	for p in $daemon_pids; do kill "$p" 2>/dev/null || true; done
	for p in $daemon_pids; do wait "$p" 2>/dev/null || true; done
	for p in $nats_pids; do kill "$p" 2>/dev/null || true; done
	wait
}
trap stop INT TERM EXIT

routes=""
servers=""
for i in 0 1 2; do
	routes="$routes${routes:+, }\"nats-route://127.0.0.1:$((port + 10 + i))\""
	servers="$servers${servers:+, }\"nats://127.0.0.1:$((port + i))\""
done
for i in 0 1 2; do
	cat >"$dir/nats$i.conf" <<EOF
server_name: n$i
listen: 127.0.0.1:$((port + i))
http: 127.0.0.1:$((port + 30 + i))
jetstream { store_dir: "$dir/nats$i" }
cluster { name: leaselog, listen: 127.0.0.1:$((port + 10 + i)), routes: [$routes] }
EOF
	setsid "$dir/bin/nats-server" -c "$dir/nats$i.conf" >"$dir/nats$i.log" 2>&1 &
	nats_pids="$nats_pids $!"
	echo "nats n$i: pid $! on 127.0.0.1:$((port + i)), log $dir/nats$i.log"
done

# The daemons need JetStream up: wait until every server says it is healthy.
for i in 0 1 2; do
	n=0
	until curl -sf "http://127.0.0.1:$((port + 30 + i))/healthz" >/dev/null; do
		n=$((n + 1))
		[ $n -lt 300 ] || { echo "nats n$i is not healthy: $dir/nats$i.log" >&2; exit 1; }
		sleep 0.1
	done
done

for d in 0 1; do
	cat >"$dir/daemon$d.toml" <<EOF
[server]
listen = "127.0.0.1:$((port + 20 + d))"
[store]
engine = "jetstream"
servers = [$servers]
replicas = 3
[plugins.executor]
local_capacity = 0
[log]
format = "console"
EOF
	setsid "$dir/bin/leaselog" serve --config "$dir/daemon$d.toml" --data "$dir/daemon$d" >"$dir/daemon$d.log" 2>&1 &
	daemon_pids="$daemon_pids $!"
	echo "leaselog daemon$d: pid $! on http://127.0.0.1:$((port + 20 + d)), log $dir/daemon$d.log"
	sleep 2 # the first to start leads; the second then waits as its standby
done
echo "running; Ctrl-C stops everything"
wait
