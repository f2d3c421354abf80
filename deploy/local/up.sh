#!/usr/bin/env bash
# deploy/local/up.sh: `make up`. Installs Redis, RabbitMQ and MariaDB from the
# OS packages when missing, then starts the three (in parallel) on 127.0.0.1
# with their data under .run/, and creates the MySQL database and user.
# Idempotent: when all three already answer it only checks and returns.
set -Eeuo pipefail

# shellcheck source=deploy/local/lib.sh
. "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/lib.sh"
trap 'fg_err "$0: failed at line $LINENO: $BASH_COMMAND"' ERR

# Fast path: everything answers, the database user works (and no
# FLASHGATE_LOCAL_APPENDFSYNC asks for a change: service.sh start applies it).
if [[ -z ${FLASHGATE_LOCAL_APPENDFSYNC:-} ]] && fg_redis_ping && fg_rabbitmq_ping && fg_mariadb_ping &&
	timeout 5 mariadb --no-defaults -h127.0.0.1 -P"$FG_MARIADB_PORT" -u"$FG_MARIADB_USER" \
		-p"$FG_MARIADB_PASSWORD" "$FG_MARIADB_DB" -e 'SELECT 1' >/dev/null 2>&1; then
	"$FG_LOCAL_DIR/service.sh" status all
	exit 0
fi

# --- packages ------------------------------------------------------------------
missing=()
have() { command -v "$1" >/dev/null 2>&1 || [[ -x $1 ]]; }
{ have redis-server && have redis-cli; } || missing+=(redis-server)
{ have "$FG_RABBITMQ_BIN/rabbitmq-server" && have erl; } || missing+=(rabbitmq-server)
{ have mariadbd && have mariadb-install-db && have mariadb && have mysqladmin; } || missing+=(mariadb-server)

if ((${#missing[@]})); then
	fg_log "installing ${missing[*]}"
	fg_apt_install "${missing[@]}"
fi

# --- servers, in parallel ----------------------------------------------------------
mkdir -p "$FG_RUN"
pids=()
for svc in "${FG_SERVICES[@]}"; do
	"$FG_LOCAL_DIR/service.sh" start "$svc" &
	pids+=($!)
done
rc=0
for pid in "${pids[@]}"; do
	wait "$pid" || rc=1
done
if ((rc)); then
	fg_err "make up: some services did not start (see above)"
	exit 1
fi
fg_log "up: redis 127.0.0.1:$FG_REDIS_PORT, rabbitmq 127.0.0.1:$FG_RABBITMQ_PORT (node $RABBITMQ_NODENAME), mariadb 127.0.0.1:$FG_MARIADB_PORT (db/user/password $FG_MARIADB_DB/$FG_MARIADB_USER/$FG_MARIADB_PASSWORD)"
