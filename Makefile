# leaselog — see README.md.
GO      ?= go
DATA    ?= ./leaselog-data
BENCH   ?= .
COUNT   ?= 6
BENCHTIME ?= 1s

.PHONY: build test vet fmt-check sim kill fuzz bench bench-large bench-scale bench-clean run replay demo cluster clean

# Reliability knobs (docs/reliability.md): simulation seeds, SIGKILL runs,
# time per fuzz target.
SEEDS    ?= 1000
FIRST    ?= 1
KILLS    ?= 100
FUZZTIME ?= 30s

build:
	$(GO) build -o bin/leaselog ./cmd/leaselog

# The test command of the README and of CI: formatting, vet, every test with
# the race detector (the simulation runs 40 seeds there: the detector slows it
# tenfold), then 1000 simulation seeds without it.
test: fmt-check vet
	$(GO) test -race -count=1 ./...
	$(GO) test -count=1 ./sim -run 'TestSimulation$$' -sim.seeds=1000

# The deterministic simulation on $(SEEDS) seeds (seeds 1..SEEDS, and the
# regression seeds), each checked for docs/design.md §7 and for linearizability.
sim:
	$(GO) test -count=1 -timeout 0 ./sim -run 'TestSimulation$$' -sim.first=$(FIRST) -sim.seeds=$(SEEDS)

# The real daemon under HTTP load, SIGKILLed $(KILLS) times.
kill:
	$(GO) test -count=1 -timeout 0 ./cmd/leaselog -run 'TestKillUnderLoad$$' -kill.runs=$(KILLS) -v

# Every fuzz target for $(FUZZTIME) each.
fuzz:
	FUZZTIME=$(FUZZTIME) GO=$(GO) scripts/fuzz.sh

vet:
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

# Benchmarks with their baselines, $(COUNT) runs each, for benchstat.
bench:
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchmem -count $(COUNT) -benchtime $(BENCHTIME) -timeout 0 ./eventlog ./replay ./projection ./fsm ./server ./cmd/leaselog | tee bench.out

# The benchmarks on 10M-event logs too (fixtures take minutes to build, once;
# they are cached in $$LEASELOG_BENCH_DIR, and bench-clean removes them).
bench-large:
	LEASELOG_BENCH_LARGE=1 $(MAKE) bench COUNT=$(COUNT) BENCH='$(BENCH)'

# The scale modes of `leaselog bench`, each on a daemon of its own, at
# sizes that finish here in minutes: DENSITY_WORKERS × DENSITY_LEASES live
# leases heartbeated every DENSITY_RENEW for DENSITY_DURATION, then
# MILLION_JOBS queued. The full sizes (docs/performance.md):
#   make bench-scale DENSITY_WORKERS=5000 DENSITY_LEASES=100 DENSITY_RENEW=10s DENSITY_DURATION=5m MILLION_JOBS=1000000
DENSITY_WORKERS  ?= 500
DENSITY_LEASES   ?= 100
DENSITY_RENEW    ?= 10s
DENSITY_DURATION ?= 1m
MILLION_JOBS     ?= 200000
bench-scale: build
	bin/leaselog bench --mode density --workers $(DENSITY_WORKERS) --leases $(DENSITY_LEASES) --renew $(DENSITY_RENEW) --duration $(DENSITY_DURATION)
	bin/leaselog bench --mode million --jobs $(MILLION_JOBS)

bench-clean:
	rm -rf "$${LEASELOG_BENCH_DIR:-$${TMPDIR:-/tmp}/leaselog-bench}"

# The daemon on the embedded default: Pebble in $(DATA), the API on
# 127.0.0.1:7420, the local worker on. Stop it with ^C.
run: build
	./bin/leaselog serve --data $(DATA) --log-format console

# Rebuild and verify the log in $(DATA) offline (stop the daemon first).
replay: build
	./bin/leaselog replay --data $(DATA) --verify

demo: build
	./bin/leaselog demo

# Three NATS servers (one JetStream cluster) and two daemons on the stream,
# one active and one standby, on this machine (docs/cluster.md).
cluster:
	GO=$(GO) scripts/cluster.sh

clean:
	rm -rf bin bench.out
