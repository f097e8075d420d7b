# calico-node: one binary for Calico networking, policy, BGP, CNI and CLI.
#
#   make run     build and run a single node with the embedded etcd
#   make test    install test prerequisites, build, run every test
#   make build   build bin/calico-node and its calico/calico-ipam/calicoctl links

GO       ?= go
BIN      := bin
BINARY   := $(BIN)/calico-node
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -s -w -X github.com/projectcalico/calico-node/buildinfo.Version=$(VERSION)
TESTFLAGS ?=
# Run-time flags for `make run`; override e.g. RUN_ARGS="--etcd-endpoints=http://127.0.0.1:2379".
RUN_ARGS ?=

.PHONY: all build test unit deps run fuzz bench-confwatch clean

all: build

build:
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BINARY) .
	ln -sf calico-node $(BIN)/calico
	ln -sf calico-node $(BIN)/calico-ipam
	ln -sf calico-node $(BIN)/calicoctl

deps:
	./scripts/deps.sh

# Tests share the one binary built here (CALICO_NODE_BIN) instead of each
# package building its own.
test: deps build
	CALICO_NODE_BIN=$(abspath $(BINARY)) $(GO) test -count=1 -timeout 20m $(TESTFLAGS) ./...

# Pure packages only: no root, no etcd.
unit:
	$(GO) test -count=1 ./selector/ ./api/

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 30s ./selector/
	$(GO) test -run '^$$' -fuzz FuzzDecode -fuzztime 30s ./api/

bench-confwatch: deps build
	CALICO_NODE_BIN=$(abspath $(BINARY)) $(GO) test -count=1 -run '^$$' -bench BenchmarkConfwatch -benchtime 1x -timeout 30m ./confwatch/

run: build
	@if [ "$$(id -u)" != 0 ]; then echo "calico-node run needs root (it programs the kernel): sudo make run"; exit 1; fi
	$(BINARY) run $(RUN_ARGS)

clean:
	rm -rf $(BIN)
