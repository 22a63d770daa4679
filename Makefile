# goroce: two commands on a fresh machine (after make deps, as root).
#   make run   the main job: an RC ping-pong between two roced processes
#   make test  every test CI runs (.ci/run calls exactly this)
SHELL    := /bin/bash
GO       ?= go
BIN      := bin
ROCED    := $(BIN)/roced
# libgoroce.so, the libibverbs-compatible library (LD_PRELOAD): built
# against <infiniband/verbs.h> (libibverbs-dev), its ibv_* symbols given
# libibverbs' versions by the version script (cmd/libgoroce/libibverbs.map).
# It is plain C and loads the Go engine, libgoroce-engine.so beside it, at
# its first call that needs it, so that a program may fork() before then
# (scripts/build-libgoroce.sh builds both; TestMain builds with it too).
LIBGOROCE := $(BIN)/libgoroce.so
# An execution count, not a duration: go1.26's fuzz coordinator can fail a
# duration-bounded run with a bare "context deadline exceeded" at the
# deadline (golang/go#75804, fixed in go1.27), which load makes likelier.
# 50000 inputs is about a second for a parser and 10-20 s for FuzzReceive.
FUZZTIME ?= 50000x

.PHONY: all deps build roced libgoroce run test lab-images vet unit newcomer offheap system system-fuzz system-device system-tools system-readme fuzz-smoke interop bench clean

all: build

# The Debian packages every target needs, those missing only (as root;
# scripts/deps --list prints them for an apt-get line).
deps:
	scripts/deps

# build makes both; make run needs only roced, so that it works on a
# machine without libibverbs-dev (libgoroce.so's headers).
build: roced libgoroce

roced:
	$(GO) build -o $(ROCED) ./cmd/roced

libgoroce:
	GO=$(GO) scripts/build-libgoroce.sh $(BIN)

run: roced
	ROCED=$(ROCED) scripts/run-pingpong.sh

# vet: gofmt, go vet, and internal/doclint (every exported identifier
# outside package main has a doc comment).
# The order matters: cheap checks first, then the unit tests, then the
# tests that need root (network namespaces, AF_PACKET, AF_XDP) and the long
# in-memory runs beside the fuzz smoke (system-fuzz: the one mostly waits,
# the other computes), then interop against the lab VM.
# lab-images first starts building the guest images (when not cached) in
# the background, so that on a fresh machine they are ready by interop.
test: lab-images vet unit newcomer offheap system-fuzz interop

lab-images:
	interop/interop-lab.sh images

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...
	$(GO) run ./internal/doclint

# Several packages bind UDP port 4791 on loopback addresses: run in
# parallel they would take it from one another. -p 1 would also build one
# package at a time, and on a fresh machine building everything with -race
# is most of this stage (from an empty cache under load: 1232 s at -p 1,
# 724 s at -p 2). So go test builds and links on every core while -exec
# (scripts/unit-exec) runs each test binary under one lock (flock,
# util-linux): one package's tests at a time, the next one's build
# overlapping them, and each binary linked once (a separate build pass
# linked every binary twice). interop, whose tests have addresses and
# ports of their own, runs beside the others (scripts/unit-exec says why).
# The time go test prints per package includes its wait for the lock. bth
# runs again with the purego tag: its CRC without assembly, as on other CPUs.
UNITLOCK := $(CURDIR)/$(BIN)/.unit.lock
unit:
	@mkdir -p $(BIN)
	$(GO) test -exec '$(CURDIR)/scripts/unit-exec $(UNITLOCK)' -race -short -count=1 ./...
	$(GO) test -tags purego -count=1 ./bth

# examples/newcomer is a user's program: its own module, reaching goroce
# through a replace directive and its public packages only. Built from
# outside goroce's module, as a user builds it, and run over the in-memory
# link and over kernel UDP on loopback (127.0.0.1 and 127.0.0.2, as the
# unit tests bind), every operation checked.
newcomer:
	cd examples/newcomer && $(GO) vet . && $(GO) build -o ../../$(BIN)/newcomer .
	$(BIN)/newcomer -link mem
	$(BIN)/newcomer -link udp

# examples/offheap, built the same way: buffers mapped outside the Go heap
# (anonymous memory and a file) moved by WRITE and READ, every byte checked,
# over both links.
offheap:
	cd examples/offheap && $(GO) vet . && $(GO) build -o ../../$(BIN)/offheap .
	$(BIN)/offheap -link mem
	$(BIN)/offheap -link udp

# Namespace and raw-socket tests run as root (CI is root) and fail, not
# skip, without the privilege: the engine across veth pairs per link kind
# and MTU (TestVeth*, with loss, duplication and
# reordering from nic/impair), nic/impair's own forwarder tests (its
# ECN-marking bottleneck on real datagrams among them), the soak (256 MiB of each of SEND, WRITE and
# READ through 5% loss, the three side by side: -parallel 3, since the
# default is one per core), the 64 MiB messages and 100,000 QPs on one device
# (1,000 of them, chosen at random, carrying traffic); then roced's long tests
# (every -a size, the tools as real processes: cmd/roced and the packages that
# run its tools, one at a time, as when they were one package), which -short
# skips above;
# then the README's libgoroce.so lines, run as written across a veth pair,
# qperf (whose server forks a child per test) across another, UCX
# (ucx_info, ucx_perftest) across others, Open MPI across four network
# namespaces acting as hosts (docs/cluster.md's lines as written), the
# rsockets tests (rstream, librspreload.so, docs/libgoroce.md's lines) on
# veth pairs of their own, and share's server socket per network namespace.
# These run without -race, which would make them ten times slower; the
# short tests above run with it. The links' own tests across veth pairs
# (nic/...) are unit tests: the unit stage runs them as root under -race,
# and -short skips nothing in nic/... and internal/... but doclint's
# TestExit (it builds the command), run here.
# The three parts run side by side (each mostly waits: on timeouts, on
# processes): the veth tests in namespaces of their own, roced's tools on
# loopback under the unit stage's lock, the README's lines on a veth pair
# of their own. --output-sync keeps each part's lines together.
system:
	@$(MAKE) --no-print-directory -j3 --output-sync=target system-device system-tools system-readme

system-fuzz:
	@$(MAKE) --no-print-directory -j4 --output-sync=target system-device system-tools system-readme fuzz-smoke

system-device:
	$(GO) test -count=1 -parallel 3 -run 'TestVeth|TestSoak|TestLargeMessages|TestManyQPs' -v ./transport 2>&1 | grep -E '^(=== RUN|--- |\s+soak_test|ok|FAIL|panic)' ; test $${PIPESTATUS[0]} -eq 0
	$(GO) test -count=1 ./nic/impair

system-tools:
	@mkdir -p $(BIN)
	$(GO) test -exec 'flock $(UNITLOCK)' -count=1 ./cmd/roced ./tools/pingpong ./tools/perftest

system-readme:
	$(GO) test -count=1 -run '^TestExit$$' ./internal/doclint
	$(GO) test -count=1 -run 'TestVethReadme|TestQperf|TestUCX|TestOpenMPI|TestRstream|TestRspreload|TestRsocketDocs|TestRdmaCoreSuite' ./cmd/libgoroce
	$(GO) test -count=1 -run 'TestPathPerNamespace' ./share

# Every fuzz target for a bounded number of inputs: no panic, no
# out-of-range read, and each target's own invariants.
# The targets are found in the packages' test files (gofmt puts each
# "func FuzzXxx(f *testing.F)" at the start of a line): asking each package's
# test binary with -list built and linked ~25 of them, for 2.5 min under load,
# to find 7 targets in 5 packages.
fuzz-smoke:
	@set -eo pipefail; \
	targets=$$($(GO) list -f '{{.ImportPath}} {{.Dir}}{{range .TestGoFiles}} {{.}}{{end}}{{range .XTestGoFiles}} {{.}}{{end}}' ./... | \
	  while read -r pkg dir files; do \
	    [ -n "$$files" ] || continue; \
	    (cd $$dir && sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)([A-Za-z0-9_]* \*testing\.F).*/\1/p' $$files) | sed "s|^|$$pkg |"; \
	  done); \
	test -n "$$targets" || { echo "fuzz-smoke: no fuzz target found"; exit 1; }; \
	set -- $$targets; \
	while [ $$# -gt 0 ]; do \
	  pkg=$$1 f=$$2; shift 2; \
	  echo "fuzz $$pkg $$f ($(FUZZTIME))"; \
	  $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg >/tmp/goroce-fuzz.log 2>&1 || { cat /tmp/goroce-fuzz.log; exit 1; }; \
	done

# The interop matrix against the rxe lab VM, bookworm then trixie guest
# (needs root and the lab's host packages, make deps; the lab is lab/,
# RXE_PEER_DIR another; see interop/README.md).
interop: build
	GO=$(GO) interop/interop-lab.sh

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

clean:
	rm -rf $(BIN)
