#!/usr/bin/env bash
# deploy/local/down.sh: `make down`. Stops the three servers, the local
# Redis Cluster of `make up-cluster` and the high-availability topology of
# `make up-ha` (Redis Cluster with replicas, Sentinel, RabbitMQ cluster)
# cleanly (in parallel) and the epmd that RabbitMQ started; data stays in
# .run/.
set -Eeuo pipefail

# shellcheck source=deploy/local/lib.sh
. "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/lib.sh"
trap 'fg_err "$0: failed at line $LINENO: $BASH_COMMAND"' ERR

pids=()
for svc in "${FG_SERVICES[@]}"; do
	"$FG_LOCAL_DIR/service.sh" stop "$svc" &
	pids+=($!)
done
"$FG_LOCAL_DIR/cluster.sh" stop &
pids+=($!)
for ha in redis-ha.sh sentinel.sh rabbitmq-cluster.sh; do
	"$FG_LOCAL_DIR/$ha" stop &
	pids+=($!)
done
rc=0
for pid in "${pids[@]}"; do
	wait "$pid" || rc=1
done

# epmd outlives the node that started it. Stop it when no Erlang node is
# registered any more (so not someone else's).
if command -v epmd >/dev/null 2>&1 && names=$(ERL_EPMD_PORT=$FG_EPMD_PORT epmd -names 2>/dev/null); then
	if ! grep -q '^name ' <<<"$names"; then
		if ERL_EPMD_PORT=$FG_EPMD_PORT epmd -kill >/dev/null 2>&1; then fg_log "epmd: stopped"; fi
	else
		fg_log "epmd: other Erlang nodes are registered; leaving it running"
	fi
fi
exit "$rc"
