# shellcheck shell=bash disable=SC2034
# Shared by the scripts in deploy/local: where things are, and small helpers.
# Sourced, never run.

FG_LOCAL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
FG_ROOT="$(cd "$FG_LOCAL_DIR/../.." && pwd)"
FG_RUN="$FG_ROOT/.run"

FG_SERVICES=(redis rabbitmq mariadb)

# Ports and credentials: FG_REDIS_PORT, FG_REDIS_CLUSTER_PORTS,
# FG_RABBITMQ_*, FG_EPMD_PORT, FG_MARIADB_{PORT,DB,USER,PASSWORD}. Shell
# variables, not exported.
# shellcheck source=deploy/local/stack.env
. "$FG_LOCAL_DIR/stack.env"

FG_REDIS_DIR="$FG_RUN/redis"
FG_REDIS_CLUSTER_DIR="$FG_RUN/redis-cluster"

FG_MARIADB_DIR="$FG_RUN/mariadb"
FG_MARIADB_DATA="$FG_MARIADB_DIR/data"
# A unix socket path must fit in sun_path (108 bytes): fall back to /tmp when
# the repository lives somewhere deep.
FG_MARIADB_SOCKET="$FG_MARIADB_DIR/mysqld.sock"
if ((${#FG_MARIADB_SOCKET} > 100)); then
	FG_MARIADB_SOCKET="/tmp/flashgate-$(printf '%s' "$FG_ROOT" | cksum | cut -d' ' -f1)/mysqld.sock"
fi

# shellcheck source=deploy/local/rabbitmq-env.sh
. "$FG_LOCAL_DIR/rabbitmq-env.sh"

fg_log() { printf '%s\n' "$*"; }
fg_err() { printf '%s\n' "$*" >&2; }

# fg_apt_install [APT-OPTION...] PACKAGE...: installs Debian packages with
# apt-get, as root or through sudo. A package must not start its own service
# (RabbitMQ as the rabbitmq user on every interface, nginx on port 80): a
# policy-rc.d denies it for the time of the install, unless a policy is
# already in place, and is removed afterwards, also when the script is
# interrupted (the EXIT trap names it by value: the caller's locals are
# gone by then). `apt-get update` runs only when there is no package list
# yet, or when the install fails on a stale one. The lock timeout: another
# of these scripts may be installing at the same time (make -j).
fg_apt_install() {
	local sudo=() policy=/usr/sbin/policy-rc.d own=
	if ((EUID != 0)); then
		command -v sudo >/dev/null 2>&1 || {
			fg_err "need root (or sudo) to install: $*"
			return 1
		}
		sudo=(sudo)
	fi
	if [[ ! -e $policy ]]; then
		printf '#!/bin/sh\n# flashgate deploy/local: during apt-get install only\nexit 101\n' |
			"${sudo[@]}" tee "$policy" >/dev/null
		"${sudo[@]}" chmod 755 "$policy"
		own=1
		# shellcheck disable=SC2064 # expanded now, on purpose
		trap "${sudo[*]} rm -f $policy" EXIT
	fi
	local install=(env DEBIAN_FRONTEND=noninteractive apt-get install -y -o DPkg::Lock::Timeout=300 "$@") rc=0
	{
		if ! compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null; then
			"${sudo[@]}" apt-get update
		fi
		"${sudo[@]}" "${install[@]}" || { "${sudo[@]}" apt-get update && "${sudo[@]}" "${install[@]}"; }
	} || rc=$?
	if [[ -n $own ]]; then
		"${sudo[@]}" rm -f "$policy"
		trap - EXIT
	fi
	return "$rc"
}

# FG_REDIS_APPENDFSYNC: stack.env's, unless FLASHGATE_LOCAL_APPENDFSYNC
# names another for this run.
FG_REDIS_APPENDFSYNC=${FLASHGATE_LOCAL_APPENDFSYNC:-$FG_REDIS_APPENDFSYNC}
case $FG_REDIS_APPENDFSYNC in
always | everysec | no) ;;
*)
	fg_err "FLASHGATE_LOCAL_APPENDFSYNC=$FG_REDIS_APPENDFSYNC: want always, everysec or no"
	exit 2
	;;
esac

# fg_redis_fsync PORT: bring a running Redis on 127.0.0.1:PORT to
# FG_REDIS_APPENDFSYNC when FLASHGATE_LOCAL_APPENDFSYNC asks for it (CONFIG
# SET, at once, no restart), else only say when it differs; a fresh start
# writes it into the server's config file instead.
fg_redis_fsync() {
	local port=$1 now
	now=$(timeout 3 redis-cli -h 127.0.0.1 -p "$port" config get appendfsync 2>/dev/null | sed -n 2p) || return 0
	[[ -n $now && $now != "$FG_REDIS_APPENDFSYNC" ]] || return 0
	if [[ -n ${FLASHGATE_LOCAL_APPENDFSYNC:-} ]]; then
		if [[ "$(timeout 3 redis-cli -h 127.0.0.1 -p "$port" config set appendfsync "$FG_REDIS_APPENDFSYNC" 2>&1)" == OK ]]; then
			fg_log "redis 127.0.0.1:$port: appendfsync $now -> $FG_REDIS_APPENDFSYNC (FLASHGATE_LOCAL_APPENDFSYNC)"
		else
			fg_err "redis 127.0.0.1:$port: CONFIG SET appendfsync $FG_REDIS_APPENDFSYNC failed; it stays $now"
			return 1
		fi
	else
		fg_log "redis 127.0.0.1:$port: runs with appendfsync $now (stack.env says $FG_REDIS_APPENDFSYNC; FLASHGATE_LOCAL_APPENDFSYNC=$FG_REDIS_APPENDFSYNC make up changes it)"
	fi
}

# fg_tail FILE...: the end of a log, to show why something did not come up.
fg_tail() {
	local f
	for f in "$@"; do
		[[ -s $f ]] || continue
		fg_err "---- last lines of $f ----"
		tail -n 25 "$f" >&2
		fg_err "----"
	done
}

# fg_pid PIDFILE COMM: print the pid in PIDFILE if that process is alive and
# is COMM (so a stale pid file reused by another process does not count).
fg_pid() {
	local pidfile=$1 comm=$2 pid
	[[ -r $pidfile ]] || return 1
	pid=$(cat "$pidfile" 2>/dev/null) || return 1 # no trailing newline in RabbitMQ's
	pid=${pid//[[:space:]]/}
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	fg_alive "$pid" || return 1
	[[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == "$comm" ]] || return 1
	printf '%s\n' "$pid"
}

# fg_alive PID: the process exists and is not a zombie (an exited server whose
# parent has not reaped it yet).
fg_alive() {
	local stat
	[[ -n $1 ]] || return 1
	stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	stat=${stat##*) }
	[[ ${stat%% *} != Z ]]
}

# fg_wait_gone PID SECONDS: wait until PID has exited.
fg_wait_gone() {
	local pid=$1 deadline=$((SECONDS + $2))
	while fg_alive "$pid"; do
		((SECONDS < deadline)) || return 1
		sleep 0.1
	done
}

# fg_port_closed PORT: nothing accepts on 127.0.0.1:PORT.
fg_port_closed() {
	! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# --- "does it answer" probes, each quick and bounded -------------------------

fg_redis_ping() {
	[[ "$(timeout 3 redis-cli -h 127.0.0.1 -p "$FG_REDIS_PORT" ping 2>/dev/null)" == PONG ]]
}

fg_mariadb_ping() {
	# Exit status 0 also when the server denies access: it answers.
	timeout 3 mysqladmin --no-defaults -h127.0.0.1 -P"$FG_MARIADB_PORT" \
		--connect-timeout=2 -uping ping >/dev/null 2>&1
}

# An AMQP 0-9-1 handshake: send the protocol header, expect the first byte of
# a method frame (connection.start). RabbitMQ opens its listener only when it
# is ready for clients.
fg_rabbitmq_ping() (
	exec 3<>"/dev/tcp/127.0.0.1/$FG_RABBITMQ_PORT" || exit 1
	printf 'AMQP\x00\x00\x09\x01' >&3 || exit 1
	IFS= read -r -t 3 -N 1 -d '' b <&3 || exit 1
	[[ $b == $'\x01' ]]
) 2>/dev/null
