# leaselog — see README.md.
GO      ?= go
DATA    ?= ./leaselog-data
BENCH   ?= .
COUNT   ?= 6
BENCHTIME ?= 1s

.PHONY: build test vet fmt-check bench run replay demo clean

build:
	$(GO) build -o bin/leaselog ./cmd/leaselog

# The test command of the README and of CI: formatting, vet, then every test
# with the race detector.
test: fmt-check vet
	$(GO) test -race -count=1 ./...

vet:
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

# Benchmarks with their baselines, $(COUNT) runs each, for benchstat.
bench:
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchmem -count $(COUNT) -benchtime $(BENCHTIME) ./eventlog ./replay ./projection ./fsm ./server | tee bench.out

# The daemon on the embedded default: Pebble in $(DATA), the API on
# 127.0.0.1:7420, the local worker on. Stop it with ^C.
run: build
	./bin/leaselog serve --data $(DATA) --log-format console

# Rebuild and verify the log in $(DATA) offline (stop the daemon first).
replay: build
	./bin/leaselog replay --data $(DATA) --verify

demo: build
	./bin/leaselog demo

clean:
	rm -rf bin bench.out
