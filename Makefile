# leaselog — see README.md.
GO      ?= go
DATA    ?= ./leaselog-data
BENCH   ?= .
COUNT   ?= 6
BENCHTIME ?= 1s

.PHONY: build test vet fmt-check race bench run replay clean

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
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchmem -count $(COUNT) -benchtime $(BENCHTIME) ./eventlog ./replay ./projection ./fsm | tee bench.out

# Rebuild and verify the log in $(DATA), printing the table.
replay: build
	./bin/leaselog replay --data $(DATA) --verify

run: replay

clean:
	rm -rf bin bench.out
