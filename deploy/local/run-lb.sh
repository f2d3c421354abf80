#!/usr/bin/env bash
# deploy/local/run-lb.sh: `make run-lb`. The local stack (make up) with two
# gateways, one consumer and nginx in front, all on 127.0.0.1, in the
# foreground; Ctrl-C stops the four (not the services of make up).
#
#   nginx (buyers)     127.0.0.1:8080   status 127.0.0.1:8090/nginx_status
#   gateway 1          127.0.0.1:8180   admin, metrics 127.0.0.1:8181
#   gateway 2          127.0.0.1:8280   admin, metrics 127.0.0.1:8281
#   consumer metrics   127.0.0.1:8082
#
# nginx is Debian's (installed when missing), its config rendered from
# deploy/nginx.conf into .run/nginx/ (logs in .run/nginx/logs/). FLASHGATE_*
# settings in the environment apply to all three flashgate processes.
set -Eeuo pipefail

# shellcheck source=deploy/local/lib.sh
. "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/lib.sh"
trap 'fg_err "$0: failed at line $LINENO: $BASH_COMMAND"' ERR

BIN=${FLASHGATE_BIN:-$FG_ROOT/bin/flashgate}
LB=${FG_LB_ADDR:-127.0.0.1:8080}
GW1=127.0.0.1:8180 GW1_ADMIN=127.0.0.1:8181
GW2=127.0.0.1:8280 GW2_ADMIN=127.0.0.1:8281
NGINX_DIR=$FG_RUN/nginx

"$FG_LOCAL_DIR/nginx.sh" install
"$BIN" migrate

pids=()
cleanup() {
	local pid
	for pid in "${pids[@]}"; do
		kill -TERM "$pid" 2>/dev/null || true
	done
	for pid in "${pids[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
	"$FG_LOCAL_DIR/nginx.sh" stop "$NGINX_DIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

FLASHGATE_CONSUMER_METRICS_ADDR=${FLASHGATE_CONSUMER_METRICS_ADDR:-127.0.0.1:8082} "$BIN" consumer &
pids+=($!)
FLASHGATE_HTTP_ADDR=$GW1 FLASHGATE_ADMIN_ADDR=$GW1_ADMIN "$BIN" gateway &
pids+=($!)
FLASHGATE_HTTP_ADDR=$GW2 FLASHGATE_ADMIN_ADDR=$GW2_ADMIN "$BIN" gateway &
pids+=($!)

for gw in "$GW1" "$GW2"; do
	deadline=$((SECONDS + 30))
	until [[ "$(curl -s -o /dev/null -w '%{http_code}' "http://$gw/readyz" 2>/dev/null)" == 200 ]]; do
		if ((SECONDS >= deadline)); then
			fg_err "gateway $gw not ready after 30s"
			exit 1
		fi
		sleep 0.2
	done
done

"$FG_LOCAL_DIR/nginx.sh" conf "$NGINX_DIR" "$LB" "$GW1" "$GW2"
"$FG_LOCAL_DIR/nginx.sh" start "$NGINX_DIR"
fg_log "run-lb: buyers http://$LB (nginx), gateways $GW1 (admin $GW1_ADMIN) and $GW2 (admin $GW2_ADMIN); Ctrl-C stops"

# Until one of the processes ends (or Ctrl-C).
wait -n "${pids[@]}" || true
fg_err "run-lb: a flashgate process exited; stopping the rest"
exit 1
