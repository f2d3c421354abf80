# flashgate: build, local services, tests. GNU make.
#   make            build bin/flashgate
#   make up / down  start / stop Redis, RabbitMQ, MariaDB on 127.0.0.1 (data in .run/)
#   make up-cluster up + a local Redis Cluster of three primaries (127.0.0.1:7001-7003,
#                   data in .run/redis-cluster/); make down stops it too
#   make up-ha      up + the local high-availability topology, for failover tests: a Redis
#                   Cluster of three primaries with a replica each (127.0.0.1:7101-7106),
#                   a Redis primary and replica (7201-7202) watched by three Sentinels
#                   (26401-26403), a RabbitMQ cluster of three nodes (5701-5703); data in
#                   .run/redis-ha/, .run/sentinel/, .run/rabbitmq-ha/; make down stops them too
#   make run        up + build, then consumer (background) + gateway (foreground)
#   make run-lb     up + build, then nginx (127.0.0.1:8080) in front of two gateways, and a
#                   consumer (deploy/local/run-lb.sh; installs Debian's nginx when missing)
#   make tools      install promtool and prometheus (Debian's prometheus package), nginx and
#                   chromium when missing: the tests of deploy/prometheus, deploy/grafana,
#                   the load balancer (cmd/flashgate/lb_test.go) and the pages a browser
#                   shows (internal/browser) run them
#   make test       up + tools + the whole test suite, then a short run of every fuzz target
#   make test-cluster  up-cluster + the tests of the packages that use Redis, on it
#   make test-ha    up-ha + the failover tests (FLASHGATE_TEST_HA=1, tests named HA), which
#                   kill, pause and restart its nodes
#   make nemesis    up + a sale day of DURATION (default 30m) under faults thrown at random
#                   (internal/nemesis; SEED=N replays one), its history checked for
#                   linearizability and the invariants: run it before a big sale
#   make fuzz       every fuzz target for FUZZTIME each (default 3M inputs; no services needed)
#   make lint       gofmt, go vet, staticcheck (no services needed)
#   make check      lint, then up + tests (shuffled, race detector)
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := build

GO ?= go
PKG := github.com/flashgate/flashgate
BIN := bin/flashgate
RUN_DIR := $(CURDIR)/.run

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS := -s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT)

TEST_TIMEOUT ?= 30m

# How many inputs each fuzz target runs: in `make test` (FUZZTIME_SHORT), and
# in `make fuzz` (FUZZTIME). A crasher is written to the target's
# testdata/fuzz/<Target>/, where every later `go test` runs it again.
# A count, not a duration: with a duration, Go's fuzz coordinator can fail a
# target that found nothing ("context deadline exceeded", no crasher) when
# its workers are starved of CPU at the deadline (CI, 2 shared cores). A
# count has no deadline; a slow machine only takes longer (the slowest
# target runs ~8k inputs/s here).
FUZZTIME_SHORT ?= 100000x
FUZZTIME ?= 3000000x

STATICCHECK_VERSION := v0.8.2
STATICCHECK := $(RUN_DIR)/bin/staticcheck-$(STATICCHECK_VERSION)

.PHONY: build up down tools run run-lb test fuzz lint check bench clean up-cluster test-cluster up-ha test-ha nemesis

build:
	$(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/flashgate

up:
	@deploy/local/up.sh

down:
	@deploy/local/down.sh

# promtool and prometheus for the tests of the alert rules and the dashboard
# (deploy/prometheus_test.go, cmd/flashgate/dashboard_test.go): installed,
# never started as a service (deploy/local/prometheus.sh); nginx for the
# load balancer's; chromium for the tests that drive a headless browser
# (internal/browser, deploy/local/chromium.sh), which fail without it.
tools:
	@deploy/local/prometheus.sh
	@deploy/local/nginx.sh install
	@deploy/local/chromium.sh install

# The consumer runs in the background and is stopped when the gateway exits
# (Ctrl-C included); the exit status is the gateway's.
run: up build
	@FLASHGATE_CONSUMER_METRICS_ADDR=$${FLASHGATE_CONSUMER_METRICS_ADDR:-127.0.0.1:8082} ./$(BIN) consumer & consumer=$$!; \
	trap 'kill $$consumer 2>/dev/null || true; wait $$consumer 2>/dev/null || true' EXIT; \
	./$(BIN) gateway

# Two gateways behind a real nginx, as in production (deploy/nginx.conf made
# local by deploy/local/nginx.sh), and a consumer; Ctrl-C stops the four.
run-lb: up build
	@deploy/local/run-lb.sh

test: up tools
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...
	@$(MAKE) --no-print-directory fuzz FUZZTIME=$(FUZZTIME_SHORT)

# The local Redis Cluster (deploy/local/cluster.sh): three primaries from
# the same redis-server package, beside the services of `make up`, which
# the tests need too.
up-cluster: up
	@deploy/local/cluster.sh start

# `make test-cluster` runs, on the cluster of `make up-cluster`, with
# FLASHGATE_REDIS_ADDRS set to its nodes (the tests' clients and every
# process they start are cluster clients), the packages whose tests use
# Redis as the product does, whole: a new test runs there without being
# listed. A test that cannot run on a cluster skips itself, saying why
# (localstack.SingleRedisOnly), and the kit's calls that need one Redis
# skip for it: the service Redis restarted (localstack.Control), a
# redis-server of the test's own (localstack.PrivateRedis). Not here:
# reconcile, scripts and bench, whose tests use a client of one Redis.
CLUSTER_PKGS := ./internal/... ./gateway/ ./sale/... ./expiry/ ./repair/ ./consumer/ ./relay/ ./cmd/flashgate/

CLUSTER_ENV = FLASHGATE_REDIS_ADDRS=$(shell deploy/local/cluster.sh addrs)
test-cluster: up-cluster tools
	$(CLUSTER_ENV) $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $(CLUSTER_PKGS)

# The local high-availability topology (deploy/local/redis-ha.sh,
# sentinel.sh, rabbitmq-cluster.sh), beside the services of `make up`:
# each start is idempotent and heals, starting what is down and waiting,
# bounded, until its part is healthy again.
up-ha: up
	@deploy/local/redis-ha.sh start
	@deploy/local/sentinel.sh start
	@deploy/local/rabbitmq-cluster.sh start

# `make test-ha` runs the failover tests, which kill, pause and restart the
# nodes of `make up-ha` (internal/localstack.HA gives them the topology and
# skips them without FLASHGATE_TEST_HA=1, so that `make test` never runs
# them): the tests named HA (HA_RUN) of HA_PKGS.
# The processes the failover tests start, and their clients, reach the
# cluster with replicas and the three RabbitMQ nodes (a Sentinel test sets
# its own FLASHGATE_REDIS_* for its processes).
HA_PKGS := ./internal/localstack/ ./cmd/flashgate/
HA_RUN ?= HA
HA_ENV = FLASHGATE_TEST_HA=1 FLASHGATE_REDIS_ADDRS=$(shell deploy/local/redis-ha.sh addrs) \
	FLASHGATE_AMQP_URL=$(shell deploy/local/rabbitmq-cluster.sh urls)
test-ha: up-ha tools
	$(HA_ENV) $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) -run '$(HA_RUN)' $(HA_PKGS)

# The long form of the nemesis run (docs/fault-testing.md): one sale day of
# DURATION under faults thrown at random, drawn from SEED (by default the
# clock's seconds; the run prints it, and a failing run its fault schedule
# too: SEED=N replays it), then the history checked. `make test` runs the
# short form (a few fixed seeds, 20 s each). NEMESIS_TIMEOUT must leave the
# day a few minutes beyond DURATION to settle and be checked.
DURATION ?= 30m
SEED ?= $(shell date +%s)
NEMESIS_TIMEOUT ?= 3h
nemesis: up
	$(GO) test -race -count=1 -v -timeout $(NEMESIS_TIMEOUT) -run '^TestNemesis$$' ./internal/nemesis/ \
		-nemesis.duration=$(DURATION) -nemesis.seed=$(SEED)

# go test -fuzz takes one target of one package per run: each target found
# in a package that has any runs in turn, for FUZZTIME.
fuzz:
	@for pkg in $$(grep -rl --include='*_test.go' '^func Fuzz' . | grep -v '^\./\.run/' | xargs -r -n1 dirname | sort -u); do \
	  for target in $$($(GO) test -list '^Fuzz' "$$pkg" | grep '^Fuzz'); do \
	    echo "fuzz $$pkg $$target for $(FUZZTIME)"; \
	    $(GO) test -run '^$$' -fuzz "^$$target\$$" -fuzztime $(FUZZTIME) "$$pkg"; \
	  done; \
	done

# The lint half of `make check`, which .ci/run runs before `make test`.
lint: $(STATICCHECK)
	@unformatted=$$(find . -name '*.go' -not -path './.run/*' -not -path './.git/*' -not -path './bin/*' -print0 | xargs -0 -r gofmt -l); \
	if [[ -n $$unformatted ]]; then echo "gofmt -l: these files need gofmt -w:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(STATICCHECK) ./...

check: lint
	@deploy/local/up.sh
	@deploy/local/prometheus.sh
	@deploy/local/chromium.sh install
	$(GO) test -race -shuffle=on -count=1 -timeout $(TEST_TIMEOUT) ./...

# staticcheck, installed once into .run/bin (versioned name, so a new
# STATICCHECK_VERSION installs again).
$(STATICCHECK):
	@mkdir -p $(RUN_DIR)/bin/tmp
	GOBIN=$(RUN_DIR)/bin/tmp $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	@mv $(RUN_DIR)/bin/tmp/staticcheck $@ && rmdir $(RUN_DIR)/bin/tmp

# The suite measures flashgate against its baselines in one run and rewrites
# docs/benchmarks.md. It pins itself (the load) to CPU 1 and the servers it
# starts to CPU 0 when taskset exists; the cost part moves the load itself,
# to run its sale both pinned and unpinned (docs/development.md, "How to
# measure a change"). Graphviz (deploy/local/graphviz.sh, installed when
# missing) draws the cost part's profiles.
PIN_LOAD := $(shell command -v taskset >/dev/null 2>&1 && [ "$$(nproc --all)" -gt 1 ] && echo taskset -c 1)

bench: up
	@deploy/local/graphviz.sh
	$(GO) build -o $(RUN_DIR)/bench/suite ./bench/suite
	$(PIN_LOAD) $(RUN_DIR)/bench/suite -out docs/benchmarks.md

clean:
	rm -rf bin/
