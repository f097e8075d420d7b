# calico-node: one binary for Calico networking, policy, BGP, CNI and CLI.
#
#   make demo    build, then bring up a 3-node cluster in network namespaces
#                and show BGP, IPAM and policy at work (make demo-down removes it);
#                make demo-kdd: the same on the Kubernetes datastore (a real kube-apiserver)
#   make run     build and run a single node with the embedded etcd
#   make test    install test prerequisites, build, run every test
#   make build   build bin/calico-node and its calico/calico-ipam/calicoctl links,
#                and the portmap and bandwidth CNI plugins install-cni chains after calico
#   make image   build the container image as an OCI archive, bin/calico-node-image.tar

GO       ?= go
BIN      := bin
BINARY   := $(BIN)/calico-node
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT   ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS  := -s -w -X github.com/projectcalico/calico-node/internal/buildinfo.Version=$(VERSION) \
            -X github.com/projectcalico/calico-node/internal/buildinfo.Commit=$(COMMIT)
# urfave_cli_no_docs leaves out urfave/cli's man-page and markdown
# renderers (and their package init, which every CNI invocation pays).
GOTAGS   := urfave_cli_no_docs
TESTFLAGS ?=
# Run-time flags for `make run`; override e.g. RUN_ARGS="--etcd-endpoints=http://127.0.0.1:2379".
RUN_ARGS ?=
# Flags for `make demo`/`make demo-down`, e.g. DEMO_ARGS="--etcd-port=22379",
# DEMO_ARGS=--datastore=kubernetes (what `make demo-kdd` runs).
DEMO_ARGS ?=
# The demo on the Kubernetes datastore runs the kube-apiserver and kubectl
# that kube-bins caches.
DEMO_KDD = $(findstring kubernetes,$(DEMO_ARGS))

.PHONY: all build image test unit deps kube-bins run demo demo-kdd demo-down demo-bin need-root fuzz bench-confwatch bench-bgp bench-cni bench-dataplane bench-kdd-scale bench-etcd-scale clean

all: build

# CGO_ENABLED=0, as in the Dockerfile: a static binary, which install-cni
# copies onto nodes of any libc as the CNI plugin. portmap and bandwidth
# (containernetworking/plugins, a go.mod tool) are main packages: they are
# their own binaries, which install-cni takes from beside calico-node.
CNI_PLUGINS := github.com/containernetworking/plugins/plugins/meta
build:
	CGO_ENABLED=0 $(GO) build -trimpath -tags '$(GOTAGS)' -ldflags '$(LDFLAGS)' -o $(BINARY) .
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o $(BIN)/portmap $(CNI_PLUGINS)/portmap
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o $(BIN)/bandwidth $(CNI_PLUGINS)/bandwidth
	ln -sf calico-node $(BIN)/calico
	ln -sf calico-node $(BIN)/calico-ipam
	ln -sf calico-node $(BIN)/calicoctl

# The Dockerfile's image without Docker or a registry (package
# internal/ociimage): bin/calico-node over Debian's iptables, ipset and
# iproute2 (from this host's apt sources, cached in ~/.cache/calico-node/image),
# as an OCI archive named $(IMAGE). On a node:
#   ctr -n k8s.io images import bin/calico-node-image.tar
IMAGE ?= localhost:5000/calico-node:dev
image: build
	$(GO) run ./internal/ociimage/mkimage -binary $(BINARY) -o $(BIN)/calico-node-image.tar -name $(IMAGE) -version $(VERSION)

deps:
	./scripts/deps.sh

# kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and kubelet for the tests that
# need a real control plane (package internal/testkit/kubetest), built from the Go module
# proxy once into ~/.cache/calico-node/kube-bin (CALICO_KUBE_BIN_DIR);
# several minutes cold, nothing when cached. CALICO_KUBE_TESTS=skip skips.
kube-bins:
	$(GO) run ./internal/testkit/kubetest/kubebins

# Tests share the one binary built here (CALICO_NODE_BIN) instead of each
# package building its own. testsum prints a line per package, then every
# failure with its output, every skipped test with its reason, and
# "N passed, N failed, N skipped"; it fails when anything failed, and
# pipefail keeps go test's own exit status.
test: SHELL := /bin/bash
test: .SHELLFLAGS := -o pipefail -c
test: deps build kube-bins
	CALICO_NODE_BIN=$(abspath $(BINARY)) $(GO) test -json -count=1 -timeout 20m $(TESTFLAGS) ./... | $(GO) run ./internal/testkit/testsum

# Pure packages only: no root, no etcd.
unit:
	$(GO) test -count=1 ./internal/model/...

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 30s ./internal/model/selector/
	$(GO) test -run '^$$' -fuzz FuzzDecode -fuzztime 30s ./internal/model/api/

bench-confwatch: deps build
	CALICO_NODE_BIN=$(abspath $(BINARY)) $(GO) test -count=1 -run '^$$' -bench BenchmarkConfwatch -benchtime 1x -timeout 30m ./confwatch/

# BGP: block-to-route latency between two agents, and 10,000 routes from a
# BIRD peer into the kernel, calico-node next to BIRD (root: namespaces).
bench-bgp: deps build
	CALICO_NODE_BIN=$(abspath $(BINARY)) $(GO) test -count=1 -run '^$$' -bench BenchmarkBGP -benchtime 1x -timeout 30m ./bgp/

# CNI ADD/DEL latency of calico+calico-ipam (real etcd) against the
# reference ptp+host-local; figures go to docs/benchmarks.md. CNI_BENCH_N
# sets the pods per run (default 200).
bench-cni: deps build
	CALICO_NODE_BIN=$(abspath $(BINARY)) $(GO) test -count=1 -run '^$$' -bench BenchmarkCNI -benchtime 1x -timeout 30m ./internal/cni/

# Policy dataplane: 1,000 local endpoints and 500 policies compiled and
# programmed into a fresh namespace next to iptables-restore alone, and the
# latency from mixed policy changes in etcd to the kernel, and the real
# `calico-node run`'s RSS idle and with them programmed (root).
# DATAPLANE_BENCH_EPS/_POLICIES/_CHANGES scale it; DATAPLANE_BENCH_CPUPROFILE
# profiles the changes; DATAPLANE_BENCH_AGENT_ENV sets the agent's env;
# DATAPLANE_BENCH_AGENT_PROFILE=dir saves the agent's heap profiles there.
bench-dataplane: deps build
	CALICO_NODE_BIN=$(abspath $(BINARY)) $(GO) test -count=1 -run '^$$' -bench BenchmarkDataplane -benchtime 1x -timeout 30m ./integration/

# The Kubernetes API as the datastore at scale: a real kube-apiserver holding
# a seeded 100-node cluster (3,000 pods), and fleets of 1, 10, 50 and 100
# simulated agents (one process each: confwatch and the IPAM watches, no
# kernel): watches held, API server CPU and RSS, start-up, change-to-all-agents
# latency and burst throughput. KDD_SCALE_AGENTS, KDD_SCALE_NODES,
# KDD_SCALE_PODS_PER_NODE, KDD_SCALE_PROBES, KDD_SCALE_BURST scale it.
bench-kdd-scale: kube-bins
	$(GO) test -count=1 -run '^$$' -bench BenchmarkKDDScale -benchtime 1x -timeout 150m ./confwatch/

# etcd at scale: a 3-member etcd cluster (Debian's etcd on loopback) and
# fleets of 100, 500 and 1,000 simulated nodes (the agent's control plane on
# the real code, no kernel; goroutine sets packed 125 to a process), 60 s of
# pod churn (30 pods/s, capped at 1,500 / nodes pods/s) and policy changes,
# the etcd leader killed and restarted mid-churn; then the correctness
# checks and the PNGs in docs/img (docs/benchmarks.md, "etcd at scale").
# Peaks at about 8 GB of memory at 1,000 nodes. ETCD_SCALE_NODES,
# ETCD_SCALE_RATE, ETCD_SCALE_BUDGET, ETCD_SCALE_CHURN, ETCD_SCALE_PER_PROC,
# ETCD_SCALE_PODS_PER_NODE, ETCD_SCALE_PROBES, ETCD_SCALE_NICE change it.
bench-etcd-scale: deps
	$(GO) test -count=1 -run '^$$' -bench BenchmarkEtcdScale -benchtime 1x -timeout 90m ./integration/etcdscale/
	$(GO) run ./integration/etcdscale/plot -in docs/img/etcd-scale.json -out docs/img

run: build
	@if [ "$$(id -u)" != 0 ]; then echo "calico-node run needs root (it programs the kernel): sudo make run"; exit 1; fi
	$(BINARY) run $(RUN_ARGS)

need-root:
	@if [ "$$(id -u)" != 0 ]; then echo "the demo creates network namespaces and needs root: sudo make $(MAKECMDGOALS)"; exit 1; fi

demo-bin:
	$(GO) build -trimpath -o $(BIN)/calico-demo ./integration/demo

# Three nodes in network namespaces, each running `calico-node run`, pods
# made by the CNI plugin, BGP/IPAM/connectivity shown before and after
# policy; left running. State in /run/calico-demo; `make demo-down` removes
# every namespace, process and file it created. With
# DEMO_ARGS=--datastore=kubernetes Calico's data lives in a real
# kube-apiserver (built once by kube-bins; the demo gets its directory).
demo: need-root deps build demo-bin
	@set -e; kube=; \
	if [ -n "$(DEMO_KDD)" ]; then \
		bins=$$($(GO) run ./internal/testkit/kubetest/kubebins); \
		kube="--kube-bin-dir=$$(dirname "$$(echo "$$bins" | head -n1)")"; \
	fi; \
	echo $(BIN)/calico-demo up $$kube $(DEMO_ARGS); \
	$(BIN)/calico-demo up $$kube $(DEMO_ARGS)

demo-kdd:
	$(MAKE) demo DEMO_ARGS="--datastore=kubernetes $(DEMO_ARGS)"

demo-down: need-root demo-bin
	$(BIN)/calico-demo down $(DEMO_ARGS)

clean:
	rm -rf $(BIN)
