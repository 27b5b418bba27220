# perfinsp — top-level build.
#   make            build every Go tool and the daemon into bin/
#   make static     the same, statically linked (CGO_ENABLED=0), into bin/static/ (for the VM initramfs)
#   make test       every test: gofmt, go vet, unit and integration tests, the kernel-module VM tests
#                   (two lanes side by side: scripts/test.sh)
#   make bench      benchmarks, printed side by side with the peer tools
#   make bench-smoke  every benchmark once at its smallest size, checked to run to its end (in make test)
# Each area adds its own targets in mk/*.mk (kmod, vmtest, post, ptt ...).

GO      ?= go
BIN     := bin
GOFLAGS ?=
export GOFLAGS
# urfave/cli's man-page and Markdown writers are left out of the tools (no
# tool writes its docs with them): their Markdown parser's initialisation
# would run at every tool's start (GODEBUG=inittrace=1 shows it).
GOTAGS  := urfave_cli_no_docs
# The tools are linked statically (netgo, osusergo: Go's own host and user
# name lookups, which no tool makes): the dynamic loader and the C
# library's start would be a measurable part of every short run.
# The daemon keeps the C library's lookups (its socket's group may come
# from NSS, LDAP).
TOOLTAGS := $(GOTAGS),netgo,osusergo
# Every tool's --version (internal/cliutil): the same string for one build.
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo unknown)
LDVERSION := -X perfinsp/internal/cliutil.version=$(VERSION)


.PHONY: all build static test gotest lint bench clean deps prereqs
all: build

# Go at go.mod's version and a C compiler, or the exact command to get them.
prereqs:
	@GO=$(GO) bash scripts/check-prereqs.sh

build: prereqs
	@mkdir -p $(BIN)
	$(GO) build -tags $(TOOLTAGS) -ldflags '$(LDVERSION)' -o $(BIN)/ ./tools/...
	$(GO) build -tags $(GOTAGS) -ldflags '$(LDVERSION)' -o $(BIN)/ ./daemon/...

static:
	@mkdir -p $(BIN)/static
	CGO_ENABLED=0 $(GO) build -tags $(GOTAGS) -ldflags='-s -w $(LDVERSION)' -o $(BIN)/static/ ./tools/... ./daemon/...

deps:
	@GO=$(GO) bash scripts/check-prereqs.sh --go
	bash scripts/install-deps.sh

# staticcheck, pinned, built into build/tools from the Go module proxy on
# first use.
STATICCHECK_VERSION := v0.8.2
STATICCHECK := build/tools/staticcheck-$(STATICCHECK_VERSION)
$(STATICCHECK):
	@mkdir -p build/tools
	GOBIN=$(CURDIR)/build/tools/gobin $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	mv build/tools/gobin/staticcheck $@

lint: $(STATICCHECK)
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(STATICCHECK) ./...

# -p 1: packages one at a time; several tests measure CPU time and sampling
# rates, which other packages' tests running beside them on 2 CPUs would skew.
gotest: build
	$(GO) test -count=1 -p 1 -timeout 25m ./...

# make test runs two lanes side by side (scripts/test.sh): TEST_TARGETS on
# the host, one after another, and VM_TEST_TARGETS (the kernel-module tests
# in QEMU, which take a lock of their own) one after another at a lower CPU
# priority. Both are extended by mk/*.mk.
TEST_TARGETS := lint gotest
VM_TEST_TARGETS :=

bench: build

clean:
	rm -rf $(BIN)
	-$(MAKE) -C kmod clean 2>/dev/null

-include mk/*.mk

test: deps
	@TEST_TARGETS="$(TEST_TARGETS)" VM_TEST_TARGETS="$(VM_TEST_TARGETS)" bash scripts/test.sh
