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

# fg_redis_fsync PORT...: bring each running Redis on 127.0.0.1:PORT to
# FG_REDIS_APPENDFSYNC when FLASHGATE_LOCAL_APPENDFSYNC asks for it (CONFIG
# SET, at once, no restart), else only say when it differs; a fresh start
# writes it into the server's config file instead.
fg_redis_fsync() {
	local port now
	for port in "$@"; do
		now=$(timeout 3 redis-cli -h 127.0.0.1 -p "$port" config get appendfsync 2>/dev/null | sed -n 2p) || continue
		[[ -n $now && $now != "$FG_REDIS_APPENDFSYNC" ]] || continue
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
	done
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

# fg_state PID: the process's state letter in /proc/PID/stat (R, S, D; T
# when stopped by SIGSTOP, Z when it has exited and is not reaped yet).
fg_state() {
	local stat
	[[ -n $1 ]] || return 1
	stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	stat=${stat##*) }
	printf '%s\n' "${stat%% *}"
}

# fg_alive PID: the process exists and is not a zombie (an exited server whose
# parent has not reaped it yet).
fg_alive() {
	local state
	state=$(fg_state "$1") && [[ $state != Z ]]
}

# fg_paused PID: the process is stopped (SIGSTOP).
fg_paused() { [[ "$(fg_state "$1")" == T ]]; }

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

# fg_wait_closed PREFIX PID PORT...: wait (10 s at most) until nothing
# accepts on the PORTs that PID, which has exited, listened on (a child
# may hold a socket a little longer).
fg_wait_closed() {
	local prefix=$1 pid=$2 p deadline=$((SECONDS + 10))
	shift 2
	for p in "$@"; do
		until fg_port_closed "$p"; do
			((SECONDS < deadline)) || {
				fg_err "$prefix: 127.0.0.1:$p still accepts after pid $pid exited"
				return 1
			}
			sleep 0.1
		done
	done
}

# fg_wait_until SECONDS STEP COMMAND...: run COMMAND every STEP seconds
# until it succeeds; fail when SECONDS have passed first.
fg_wait_until() {
	local deadline=$((SECONDS + $1)) step=$2
	shift 2
	until "$@"; do
		((SECONDS < deadline)) || return 1
		sleep "$step"
	done
}

# fg_need_cmd COMMAND...: exit 1 unless each is a command or an executable
# file.
fg_need_cmd() {
	local c
	for c in "$@"; do
		command -v "$c" >/dev/null 2>&1 || [[ -x $c ]] || {
			fg_err "$c not found: run 'make up' (it installs the packages)"
			exit 1
		}
	done
}

# fg_has WORD LIST...: WORD is one of LIST.
fg_has() {
	local w
	for w in "${@:2}"; do [[ $w == "$1" ]] && return 0; done
	return 1
}

# fg_commas WORD...: the words on one line, comma-separated.
fg_commas() {
	local IFS=,
	printf '%s\n' "$*"
}

# fg_addrs PORT...: 127.0.0.1:PORT of each, as FLASHGATE_REDIS_ADDRS takes
# them.
fg_addrs() { fg_commas "${@/#/127.0.0.1:}"; }

# fg_launch DIR LOG COMMAND...: run COMMAND in DIR in the background, in a
# session of its own (a Ctrl-C in make's terminal does not reach it), output
# appended to LOG, without the lock fd 9; LAUNCH_PID gets its pid, the
# server's (the subshell execs it), so an early exit is seen at once.
fg_launch() {
	local dir=$1 log=$2
	shift 2
	(cd "$dir" && exec setsid nohup "$@") >>"$log" 2>&1 </dev/null 9>&- &
	LAUNCH_PID=$!
}

# fg_lock PREFIX DIR ACTION: hold DIR/.lock on fd 9 until the script exits,
# so that the calls that start or stop DIR's processes run one at a time
# (exit 1 without it after 600 s). Fails, saying "not running", when
# ACTION is stop and there is no DIR: `make down` on a machine that never
# ran it has nothing to stop, and leaves no folder behind.
fg_lock() {
	local prefix=$1 dir=$2
	if [[ $3 == stop && ! -d $dir ]]; then
		fg_log "$prefix: not running"
		return 1
	fi
	mkdir -p "$dir"
	exec 9>"$dir/.lock"
	flock -w 600 9 || {
		fg_err "$prefix: could not get $dir/.lock within 600s"
		exit 1
	}
}

# --- "does it answer" probes, each quick and bounded -------------------------

# fg_redis_cli PORT ARGS...: redis-cli against 127.0.0.1:PORT, bounded,
# errors dropped, CRs removed; fails when redis-cli does.
fg_redis_cli() { timeout 3 redis-cli -h 127.0.0.1 -p "$@" 2>/dev/null | tr -d '\r'; }

# fg_redis_ping [PORT]: the Redis on PORT (FG_REDIS_PORT) answers PONG.
fg_redis_ping() { [[ "$(fg_redis_cli "${1:-$FG_REDIS_PORT}" ping)" == PONG ]]; }

# fg_mariadb_ping: the MariaDB on FG_MARIADB_PORT answers.
fg_mariadb_ping() {
	# Exit status 0 also when the server denies access: it answers.
	timeout 3 mysqladmin --no-defaults -h127.0.0.1 -P"$FG_MARIADB_PORT" \
		--connect-timeout=2 -uping ping >/dev/null 2>&1
}

# fg_amqp_ping PORT: an AMQP 0-9-1 handshake with the node on PORT: send
# the protocol header, expect the first byte of a method frame
# (connection.start). RabbitMQ opens its listener only when it is ready
# for clients.
fg_amqp_ping() (
	exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
	printf 'AMQP\x00\x00\x09\x01' >&3 || exit 1
	IFS= read -r -t 3 -N 1 -d '' b <&3 || exit 1
	[[ $b == $'\x01' ]]
) 2>/dev/null

# fg_rabbitmq_ping: the RabbitMQ node of `make up` answers.
fg_rabbitmq_ping() { fg_amqp_ping "$FG_RABBITMQ_PORT"; }

# --- config files ------------------------------------------------------------

# fg_rabbitmq_conf PORT: the settings of a local RabbitMQ node with AMQP on
# 127.0.0.1:PORT (rabbitmq.conf).
fg_rabbitmq_conf() {
	cat <<EOF
listeners.tcp.default = 127.0.0.1:$1
vm_memory_high_watermark.relative = 0.4
disk_free_limit.absolute = 50MB
log.file.level = info
log.console = false
# Created with the node's database (so on the first start only); guest
# may connect over loopback only (RabbitMQ's loopback_users default).
default_user = $FG_RABBITMQ_USER
default_pass = $FG_RABBITMQ_PASSWORD
EOF
}

# fg_erlang_cookie FILE: make FILE an Erlang cookie (20 random capitals,
# readable by its owner only) unless it is one already.
fg_erlang_cookie() {
	local cookie
	[[ -s $1 ]] && return 0
	cookie=$(LC_ALL=C tr -dc '[:upper:]' </dev/urandom 2>/dev/null | head -c 20 || true)
	(umask 077 && printf '%s' "$cookie" >"$1")
	chmod 400 "$1"
}

# fg_redis_conf PORT DIR [DATA]: the lines every local Redis's config file
# starts with: 127.0.0.1:PORT only, in the foreground (fg_launch puts it in
# the background), its pid and log files in DIR; with DATA, a data node's:
# its data there, in an AOF (FG_REDIS_APPENDFSYNC), no RDB snapshots.
fg_redis_conf() {
	cat <<EOF
bind 127.0.0.1
port $1
protected-mode yes
daemonize no
pidfile "$2/redis.pid"
logfile "$2/redis.log"
loglevel notice
EOF
	[[ -n ${3:-} ]] || return 0
	cat <<EOF
dir "$3"
appendonly yes
appendfsync $FG_REDIS_APPENDFSYNC
save ""
EOF
}

# --- Redis: INFO, Redis Cluster ----------------------------------------------

# fg_field TEXT NAME: the value of NAME in an INFO or CLUSTER INFO answer.
fg_field() { sed -n "s/^$2:\(.*\)\$/\1/p" <<<"$1"; }

# fg_redis_info PORT NAME ARGS...: the answer of the Redis on PORT to ARGS
# (INFO, CLUSTER INFO: NAME:value lines); fails when it has no NAME.
fg_redis_info() {
	local port=$1 name=$2 out
	shift 2
	out=$(fg_redis_cli "$port" "$@") || return 1
	[[ $out == *"$name":* ]] || return 1
	printf '%s\n' "$out"
}

# fg_cluster_info PORT: CLUSTER INFO of the node on PORT.
fg_cluster_info() { fg_redis_info "$1" cluster_state cluster info; }

# fg_cluster_fresh PORT...: no node has joined a cluster or been given a
# slot yet.
fg_cluster_fresh() {
	local port info
	for port in "$@"; do
		info=$(fg_cluster_info "$port") || return 1
		[[ $(fg_field "$info" cluster_known_nodes) == 1 && $(fg_field "$info" cluster_slots_assigned) == 0 ]] || return 1
	done
}

# fg_cluster_formed PORT...: every node knows every other and all slots are
# assigned; after a restart such a cluster becomes ok by itself once the
# nodes have talked (and a replica whose primary stays away has taken over).
fg_cluster_formed() {
	local port info
	for port in "$@"; do
		info=$(fg_cluster_info "$port") || return 1
		[[ $(fg_field "$info" cluster_known_nodes) == "$#" &&
			$(fg_field "$info" cluster_slots_assigned) == 16384 ]] || return 1
	done
}

# fg_cluster_form PREFIX DIR REPLICAS PORT...: make the nodes on the PORTs
# one cluster (redis-cli --cluster create, REPLICAS 0 or 1 a primary, its
# output in DIR/create.log) when none has joined one yet; fail, saying so,
# when they are neither new nor one formed cluster.
fg_cluster_form() {
	local prefix=$1 dir=$2 replicas=$3 what
	shift 3
	if fg_cluster_fresh "$@"; then
		what="$(($# / (replicas + 1))) primaries"
		((replicas == 0)) || what+=" with a replica each"
		fg_log "$prefix: creating a cluster of $what"
		if ! timeout 60 redis-cli --cluster create "${@/#/127.0.0.1:}" --cluster-replicas "$replicas" --cluster-yes \
			>"$dir/create.log" 2>&1; then
			fg_err "$prefix: redis-cli --cluster create failed"
			fg_tail "$dir/create.log"
			exit 1
		fi
	elif ! fg_cluster_formed "$@"; then
		fg_err "$prefix: the nodes on $(fg_addrs "$@") are neither a new cluster nor one formed cluster"
		fg_err "(a node's data was removed, or another program answers there); '$0 reset' starts an empty one"
		return 1
	fi
}

# --- nodes of cluster.sh, redis-ha.sh, sentinel.sh, rabbitmq-cluster.sh ------
#
# The fg_*_node(s) functions start, stop, kill and pause a script's nodes,
# each named by an ID (its port, or its number), through what the script
# defines for them:
#   node_pid ID     print the pid of its live process; fail when none
#   node_ping ID    it answers
#   node_launch ID  say that it starts, start it in the background
#                   (fg_launch), set LAUNCH_PID
#   node_name ID    how the script's lines name it ("node 127.0.0.1:7101",
#                   "fgha1@localhost"); beside a pid without "127.0.0.1:"
#   node_ports ID   the ports it listens on, one a line
#   node_logs ID    the files that say why it did not come up, one a line
# and START_TIMEOUT, STOP_TIMEOUT: seconds for it to answer, to stop.
# PREFIX begins each line they print.

# fg_redis_nodes DIR: the script's nodes are Redis servers, each in
# DIR/PORT (redis.pid, redis.log, redis.out): define node_dir, node_pid,
# node_ping and node_logs for them, and their START_TIMEOUT and
# STOP_TIMEOUT as service.sh's Redis has them (overridable for slow
# machines).
# shellcheck disable=SC2317 # called by the fg_*_node(s) functions
fg_redis_nodes() {
	FG_REDIS_NODES_DIR=$1
	START_TIMEOUT=${FG_START_TIMEOUT:-30}
	STOP_TIMEOUT=${FG_STOP_TIMEOUT:-30}
	node_dir() { printf '%s\n' "$FG_REDIS_NODES_DIR/$1"; }
	node_pid() { fg_pid "$(node_dir "$1")/redis.pid" redis-server; }
	node_ping() { fg_redis_ping "$1"; }
	node_logs() { printf '%s\n' "$(node_dir "$1")/redis.log" "$(node_dir "$1")/redis.out"; }
}

# fg_foreign_node PREFIX ID: no process of ours runs the node, yet its port
# answers: say so (it is not ours to stop).
fg_foreign_node() {
	local port
	if node_pid "$2" >/dev/null || ! node_ping "$2"; then
		return 1
	fi
	port=$(node_ports "$2" | head -n 1)
	fg_err "$1: 127.0.0.1:$port answers, but not a node started by this script; not stopping it"
}

# fg_launch_node PREFIX ID: resume the node if it is paused, launch it if it
# does not answer; LAUNCHED gets the pid of a process to wait for, if any.
fg_launch_node() {
	local prefix=$1 id=$2 pid name p
	LAUNCHED=
	name=$(node_name "$id")
	if pid=$(node_pid "$id") && fg_paused "$pid"; then
		fg_log "$prefix: $name (pid $pid) was paused; resuming it"
		kill -CONT "$pid"
	fi
	node_ping "$id" && return 0
	if pid=$(node_pid "$id"); then
		fg_log "$prefix: pid $pid of ${name/127.0.0.1:/} is there but does not answer yet; waiting for it"
		LAUNCHED=$pid
		return 0
	fi
	for p in $(node_ports "$id"); do
		if ! fg_port_closed "$p"; then
			fg_err "$prefix: 127.0.0.1:$p is taken by another program:"
			ss -ltnp "sport = :$p" >&2 2>/dev/null || true
			exit 1
		fi
	done
	node_launch "$id"
	LAUNCHED=$LAUNCH_PID
}

# fg_wait_node PREFIX ID PID: wait until the node answers; exit 1, with
# the end of its logs, when it does not within START_TIMEOUT or when PID
# (its process) exits first.
fg_wait_node() {
	local prefix=$1 id=$2 pid=$3 deadline=$((SECONDS + START_TIMEOUT)) why
	until node_ping "$id"; do
		why=
		if ((SECONDS >= deadline)); then
			why="did not answer within ${START_TIMEOUT}s"
		elif ! fg_alive "$pid" && ! node_pid "$id" >/dev/null; then
			why="exited during start-up"
		fi
		if [[ -n $why ]]; then
			fg_err "$prefix: $(node_name "$id") $why"
			# shellcheck disable=SC2046 # a file a line
			fg_tail $(node_logs "$id")
			exit 1
		fi
		sleep 0.1
	done
}

# fg_start_nodes PREFIX ID...: launch every node that is down, all at once
# (fg_launch_node), then wait until each answers (fg_wait_node).
fg_start_nodes() {
	local prefix=$1 id i pids=()
	shift
	for id in "$@"; do
		fg_launch_node "$prefix" "$id"
		pids+=("$LAUNCHED")
	done
	for i in "${!pids[@]}"; do
		[[ -z ${pids[i]} ]] || fg_wait_node "$prefix" "${@:i+1:1}" "${pids[i]}"
	done
}

# fg_stop_nodes PREFIX ID...: SIGTERM to every node at once (a paused one,
# resumed, takes it then), then wait until each has exited (SIGKILL after
# STOP_TIMEOUT) and its ports are closed; add the number that ran to
# STOPPED. Fails when one did not stop, or a port answers that is not ours.
fg_stop_nodes() {
	local prefix=$1 id pid name rc=0 ids=() pids=() i
	shift
	for id in "$@"; do
		if pid=$(node_pid "$id"); then
			kill -TERM "$pid" 2>/dev/null || true
			kill -CONT "$pid" 2>/dev/null || true
			ids+=("$id")
			pids+=("$pid")
		elif fg_foreign_node "$prefix" "$id"; then
			rc=1
		fi
	done
	for i in "${!pids[@]}"; do
		id=${ids[i]} pid=${pids[i]}
		if ! fg_wait_gone "$pid" "$STOP_TIMEOUT"; then
			name=$(node_name "$id")
			fg_err "$prefix: ${name/127.0.0.1:/} (pid $pid) still there after ${STOP_TIMEOUT}s; sending SIGKILL"
			kill -KILL "$pid" 2>/dev/null || true
			fg_wait_gone "$pid" 10 || {
				rc=1
				continue
			}
		fi
		# shellcheck disable=SC2046 # a port a line
		fg_wait_closed "$prefix" "$pid" $(node_ports "$id") || rc=1
	done
	STOPPED=$((STOPPED + ${#pids[@]}))
	return "$rc"
}

# fg_kill_node PREFIX ID: SIGKILL the node (a crash: no last write) and
# wait until it has exited and its ports are closed.
fg_kill_node() {
	local prefix=$1 id=$2 pid name
	name=$(node_name "$id")
	if ! pid=$(node_pid "$id"); then
		fg_log "$prefix: $name is not running"
		return 0
	fi
	kill -KILL "$pid" 2>/dev/null || true
	fg_wait_gone "$pid" 10 || {
		fg_err "$prefix: ${name/127.0.0.1:/} (pid $pid) survives SIGKILL"
		return 1
	}
	# shellcheck disable=SC2046 # a port a line
	fg_wait_closed "$prefix" "$pid" $(node_ports "$id") || return 1
	fg_log "$prefix: killed $name (pid $pid)"
}

# fg_signal_node PREFIX ID STOP|CONT: pause the node (SIGSTOP: alive and
# silent, as a hung machine) or resume it; wait until /proc says so.
fg_signal_node() {
	local prefix=$1 id=$2 sig=$3 pid name
	name=$(node_name "$id")
	if ! pid=$(node_pid "$id"); then
		fg_err "$prefix: $name is not running"
		return 1
	fi
	kill -"$sig" "$pid"
	if ! fg_wait_until 10 0.05 fg_signalled "$pid" "$sig"; then
		fg_err "$prefix: ${name/127.0.0.1:/} (pid $pid) did not take SIG$sig within 10s"
		return 1
	fi
	if [[ $sig == STOP ]]; then
		fg_log "$prefix: paused $name (pid $pid)"
	else
		fg_log "$prefix: resumed $name (pid $pid)"
	fi
}

# fg_signalled PID STOP|CONT: the process is paused (STOP) or not (CONT).
fg_signalled() {
	if fg_paused "$1"; then
		[[ $2 == STOP ]]
	else
		[[ $2 == CONT ]]
	fi
}
