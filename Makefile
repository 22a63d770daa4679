# goroce: two commands on a fresh machine.
#   make run   the main job
#   make test  every test CI runs (.ci/run calls exactly this)
GO      ?= go
BIN     := bin
ROCED   := $(BIN)/roced
FUZZTIME ?= 10s

.PHONY: all build run test vet unit fuzz-smoke interop bench clean

all: build

build:
	$(GO) build -o $(ROCED) ./cmd/roced

run: build
	$(ROCED) decode bth/testdata/captures/rc_pingpong_s64.pcap

test: vet unit fuzz-smoke interop

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...

unit:
	$(GO) test -race -count=1 ./...

# Every fuzz target for a short, bounded time: no panic, no out-of-range read.
fuzz-smoke:
	@set -e; for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "fuzz $$pkg $$f ($(FUZZTIME))"; \
	    $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg >/dev/null || { $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg; exit 1; }; \
	  done; \
	done

# The interop matrix against the rxe lab VM, bookworm then trixie guest
# (needs root and ../shared/rxe-peer; see conformance/README.md).
interop: build
	GO=$(GO) conformance/interop-lab.sh

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

clean:
	rm -rf $(BIN)
