# ferry — build, test, demo, bench.
# `make test` and `make demo` do their own set-up (see scripts/setup-test-deps).

GO          ?= go
FERRY_CACHE ?= $(HOME)/.cache/ferry
# The pinned test venv (python/requirements-test.lock), built by
# scripts/setup-test-deps; tests and benchmarks run with its Python.
PYTHON      ?= $(FERRY_CACHE)/venv/bin/python
FUZZTIME    ?= 300x
# Packages that run goroutines get -race in `make test`.
RACE_PKGS   ?= ./...
# Under -race these packages check a sample of their big golden corpora (the
# race detector makes them ~10x slower); they run again without it, in full.
# tokenize runs a third time with -tags noasm: its pure-Go classifier in
# place of the SIMD one (classify_amd64.s), and the encode loop's inner loop
# in Go (takeWordsGo, with bounds-checked reads: bytestr.Load64) in place of
# takewords_amd64.s, which TestAppendBlocks and the goldens run.
# And a fourth with -tags purego: no unsafe at all (copies of the compiled
# cache's tables and of normalized text, no huge pages).
FULL_PKGS   ?= ./tokenize/ ./cmd/dataprep/
GOBIN_DIR   := $(shell $(GO) env GOPATH)/bin
STATICCHECK_VERSION ?= v0.8.2

export FERRY_CACHE
export FERRY_PYTHON := $(PYTHON)
export FERRY_NODE_MODULES ?= $(FERRY_CACHE)/npm/node_modules
export PATH := $(GOBIN_DIR):$(PATH)

BINARIES := dataprep ckptmerge ferry-serve

# The version has one source, python/ferry/__init__.py (the wheel's too);
# the binaries print it and the commit with --version.
VERSION := $(shell sed -n 's/^__version__ = "\(.*\)"/\1/p' python/ferry/__init__.py)
COMMIT  := $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
GO_LDFLAGS := -X github.com/ferryml/ferry/internal/version.Version=$(VERSION) -X github.com/ferryml/ferry/internal/version.Commit=$(COMMIT)
WHEEL_DIR ?= dist

.PHONY: all build wheel test test-go test-python install-python setup-test-deps vet cross fmt-check staticcheck layering lint fuzz demo bench bench-quick clean

all: build

build:
	@mkdir -p bin
	$(GO) build -ldflags "$(GO_LDFLAGS)" -o bin/ $(addprefix ./cmd/,$(BINARIES))

# Wheels for linux/amd64 and linux/arm64 carrying the three commands beside
# the ferry package (pip puts them on the venv's PATH): $(WHEEL_DIR)/ferry-*.whl.
# It needs Go and python3 (3.10+, venv) only: scripts/build-wheel makes a small
# $(FERRY_CACHE)/build-venv with setuptools, or uses WHEEL_PYTHON when set.
WHEEL_PYTHON ?=
wheel:
	PYTHON=$(WHEEL_PYTHON) GO=$(GO) GO_LDFLAGS="$(GO_LDFLAGS)" scripts/build-wheel "$(WHEEL_DIR)"

setup-test-deps:
	scripts/setup-test-deps

vet:
	$(GO) vet ./...

# The tree builds on macOS, where users try dataprep and ckptmerge first:
# vet type-checks every package and its tests for darwin/arm64 (Linux-only
# code lives in _linux.go files, with portable fallbacks beside it).
cross:
	GOOS=darwin GOARCH=arm64 $(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files --cached --others --exclude-standard '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# The import layers (internal/layering): libraries never import cmd/ or
# serve/, tokenize imports nothing of ferry. `go test ./...` runs it too.
layering:
	$(GO) test -count=1 ./internal/layering/

# staticcheck, installed from the Go module proxy at the pinned version when
# missing or another version; `make test` runs it too.
staticcheck:
	@if "$(GOBIN_DIR)/staticcheck" -version 2>/dev/null | grep -qF "($(STATICCHECK_VERSION:v%=%))" || \
		$(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION); then \
		"$(GOBIN_DIR)/staticcheck" ./...; \
	else echo "staticcheck: $(STATICCHECK_VERSION) could not be installed from the module proxy"; exit 1; fi

# dataprep and ckptmerge also build for Windows (ferry-serve is Linux-only).
lint: vet cross fmt-check layering staticcheck
	GOOS=windows GOARCH=amd64 $(GO) build -o /dev/null ./cmd/dataprep ./cmd/ckptmerge

# FERRY_REQUIRE_TOOLS=1 turns a missing test tool (versitygw, node, torch) into
# a failure instead of a skip: `make test` never skips a check.
# scripts/isolated: a fresh TMPDIR and HOME for the tests, and a failure when
# they leave anything in /tmp outside that TMPDIR (as on a fresh machine).
ISOLATED := scripts/isolated

test-go: build
	FERRY_REQUIRE_TOOLS=1 $(ISOLATED) $(GO) test -race -count=1 $(RACE_PKGS)
	FERRY_REQUIRE_TOOLS=1 $(ISOLATED) $(GO) test -count=1 $(FULL_PKGS)
	FERRY_REQUIRE_TOOLS=1 $(ISOLATED) $(GO) test -count=1 -tags noasm ./tokenize/...
	FERRY_REQUIRE_TOOLS=1 $(ISOLATED) $(GO) test -count=1 -tags purego ./tokenize/...

# The tests import the installed package (pip install ./python), never the
# source tree.
install-python:
	rm -rf python/build python/ferry.egg-info
	$(PYTHON) -m pip install -q --no-deps --no-build-isolation --force-reinstall ./python
	rm -rf python/build python/ferry.egg-info

# The second lane: the packing tests again with the newest transformers 4.x
# (python/requirements-test-tf4.lock) in front of the venv's 5.x.
TF4_LANE ?= python/tests/e2e/test_packing.py

test-python: build install-python
	FERRY_REQUIRE_TOOLS=1 $(ISOLATED) $(PYTHON) -m pytest -ra python/tests/unit python/tests/e2e
	FERRY_REQUIRE_TOOLS=1 FERRY_EXPECT_TRANSFORMERS=4. PYTHONPATH=$(FERRY_CACHE)/tf4 $(ISOLATED) $(PYTHON) -m pytest -ra $(TF4_LANE)

fuzz:
	FUZZTIME=$(FUZZTIME) $(ISOLATED) scripts/fuzz

test: setup-test-deps vet cross fmt-check staticcheck test-go fuzz test-python

DEMO_OUT ?= out/demo
demo: build
	scripts/demo "$(DEMO_OUT)"

# The bench's own anchors (MosaicML Streaming, LitData, Gigatoken: bench/requirements.lock)
# are laid over the test venv in $(FERRY_CACHE)/bench-anchors.
bench: build setup-test-deps install-python
	scripts/setup-bench-deps >/dev/null
	$(GO) run ./bench/cmd/bench -mode full -anchors $(FERRY_CACHE)/bench-anchors $(BENCH_ARGS)

bench-quick: build setup-test-deps install-python
	scripts/setup-bench-deps >/dev/null
	$(GO) run ./bench/cmd/bench -mode quick -anchors $(FERRY_CACHE)/bench-anchors $(BENCH_ARGS)

clean:
	rm -rf bin out dist
