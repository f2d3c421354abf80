#!/usr/bin/env bash
# deploy/local/sentinel.sh {start|stop|status|addrs|data-addrs|name|master|reset|kill PORT|node-start PORT|pause PORT|resume PORT}
#
# One Redis primary and its replica watched by three Sentinels, on
# 127.0.0.1: the data nodes on FG_SENTINEL_DATA_PORTS of stack.env (the
# first is the primary until a failover), the Sentinels (`redis-server FILE
# --sentinel`) on FG_SENTINEL_PORTS, knowing the primary as
# FG_SENTINEL_MASTER. Plain background processes from the same
# redis-server package as `make up`'s Redis, data under .run/sentinel/PORT/.
# For the failover tests of `make test-ha` (internal/localstack.HA), which
# kill, pause and restart them.
#
# Sentinel settings: quorum 2, down-after-milliseconds 2000 (a silent
# primary is down after 2 s), failover-timeout 6000, parallel-syncs 1.
# Sentinel rewrites its own config file with what it learns (the primary
# after a failover, the replicas, the other Sentinels): the file is
# generated only when missing, never over one Sentinel has rewritten.
# A data node's file is rewritten at every start, its role taken from the
# Sentinels: a node that comes back after a failover starts as a replica
# of the primary they name now (replicaof), never as a second primary.
# Where no Sentinel answers, their files say (the one of the highest
# config epoch); where there is none yet, the first data node is the
# primary and the second its replica.
#
#   start       start every process that does not answer (and resume one
#               that was paused); wait until the Sentinels agree on a
#               primary that answers and has a replica in sync, and each
#               Sentinel knows the other two and that replica. Idempotent.
#   stop        clean shutdown of every process (SIGTERM); data and
#               configs stay in .run/sentinel
#   status      each process's pid and role, the Sentinels' primary; exit 0
#               if healthy, 3 if not
#   addrs       print the Sentinels' addresses, comma-separated, as
#               FLASHGATE_REDIS_ADDRS takes them with
#               FLASHGATE_REDIS_SENTINEL_MASTER
#   data-addrs  print the data nodes' addresses, comma-separated
#   name        print the name the Sentinels know the primary by
#               (FLASHGATE_REDIS_SENTINEL_MASTER)
#   master      print the current primary's host:port (as a quorum of the
#               Sentinels names it)
#   reset       stop, delete .run/sentinel, start: a new, empty set
#   kill PORT   SIGKILL the data node or Sentinel on PORT; returns once the
#               process is gone
#   node-start PORT  start that one process again; wait until it answers
#   pause PORT  SIGSTOP it (alive, silent: a hung machine)
#   resume PORT SIGCONT it
#
# Every wait is bounded; calls are serialized with a lock.
set -Eeuo pipefail

# shellcheck source=deploy/local/lib.sh
. "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/lib.sh"
trap 'fg_err "$0: failed at line $LINENO: $BASH_COMMAND"' ERR

FG_SENTINEL_DIR="$FG_RUN/sentinel"
IFS=, read -r -a DATA_PORTS <<<"$FG_SENTINEL_DATA_PORTS"
IFS=, read -r -a SENTINEL_PORTS <<<"$FG_SENTINEL_PORTS"
MASTER=$FG_SENTINEL_MASTER
QUORUM=2
# Overridable for slow machines, as in service.sh.
START_TIMEOUT=${FG_START_TIMEOUT:-30}
STOP_TIMEOUT=${FG_STOP_TIMEOUT:-30}
# The Sentinels finding the primary, the replica and each other (hello
# messages every 2 s), or a failover settling after a restart.
READY_TIMEOUT=${FG_HA_READY_TIMEOUT:-90}

usage() {
	fg_err "usage: $0 {start|stop|status|addrs|data-addrs|name|master|reset|kill PORT|node-start PORT|pause PORT|resume PORT}"
	exit 2
}

join_addrs() {
	local p out=()
	for p in "$@"; do out+=("127.0.0.1:$p"); done
	(
		IFS=,
		printf '%s\n' "${out[*]}"
	)
}

node_dir() { printf '%s\n' "$FG_SENTINEL_DIR/$1"; }

node_pid() { fg_pid "$(node_dir "$1")/redis.pid" redis-server; }

# is_sentinel PORT: PORT is a Sentinel's (else a data node's).
is_sentinel() {
	local p
	for p in "${SENTINEL_PORTS[@]}"; do [[ $p == "$1" ]] && return 0; done
	return 1
}

# paused PID: the process is stopped (SIGSTOP): state T in /proc.
paused() {
	local stat
	stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	stat=${stat##*) }
	[[ ${stat%% *} == T ]]
}

cli() { timeout 3 redis-cli -h 127.0.0.1 -p "$@" 2>/dev/null | tr -d '\r'; }

node_ping() { [[ "$(cli "$1" ping)" == PONG ]]; }

# field INFO NAME: the value of NAME in an INFO answer.
field() { sed -n "s/^$2:\(.*\)\$/\1/p" <<<"$1"; }

# value REPLY KEY: the value after KEY in a flat key/value reply (SENTINEL
# MASTER), one element a line.
value() { awk -v k="$2" 'NR % 2 == 1 { key = $0; next } key == k { print; exit }' <<<"$1"; }

# port_flags REPLY: "PORT FLAGS" for each entry of a SENTINEL REPLICAS or
# SENTINEL SENTINELS reply (key/value lists, one element a line).
port_flags() {
	awk 'NR % 2 == 1 { key = $0; next } key == "port" { port = $0 } key == "flags" { print port, $0 }' <<<"$1"
}

# sentinel_says PORT: the primary's host:port as the Sentinel on PORT
# names it.
sentinel_says() {
	local out
	out=$(cli "$1" sentinel get-master-addr-by-name "$MASTER") || return 1
	mapfile -t out <<<"$out"
	((${#out[@]} == 2)) && [[ ${out[1]} =~ ^[0-9]+$ ]] || return 1
	printf '%s:%s\n' "${out[0]}" "${out[1]}"
}

# quorum_master: the primary that at least QUORUM answering Sentinels name.
quorum_master() {
	local p says=()
	for p in "${SENTINEL_PORTS[@]}"; do
		says+=("$(sentinel_says "$p" || true)")
	done
	printf '%s\n' "${says[@]}" | sed '/^$/d' | sort | uniq -c | awk -v q="$QUORUM" '$1 >= q { print $2; exit }' | grep .
}

# known_master: the primary as the Sentinels know it: the one any
# answering Sentinel names, else the one in the Sentinel file of the
# highest config epoch, else none (first start).
known_master() {
	local p m best=-1 epoch file
	m=$(quorum_master) && {
		printf '%s\n' "$m"
		return 0
	}
	for p in "${SENTINEL_PORTS[@]}"; do
		m=$(sentinel_says "$p") && {
			printf '%s\n' "$m"
			return 0
		}
	done
	m=
	for p in "${SENTINEL_PORTS[@]}"; do
		file=$(node_dir "$p")/sentinel.conf
		[[ -s $file ]] || continue
		epoch=$(awk -v n="$MASTER" '$1 == "sentinel" && $2 == "config-epoch" && $3 == n { print $4 }' "$file")
		epoch=${epoch:-0}
		if ((epoch > best)); then
			best=$epoch
			m=$(awk -v n="$MASTER" '$1 == "sentinel" && $2 == "monitor" && $3 == n { print $4 ":" $5 }' "$file")
		fi
	done
	[[ -n $m ]] || return 1
	printf '%s\n' "$m"
}

need_cmd() {
	local c
	for c in "$@"; do
		command -v "$c" >/dev/null 2>&1 || {
			fg_err "$c not found: run 'make up' (it installs the packages)"
			exit 1
		}
	done
}

# check_port PORT: PORT is a data node's or a Sentinel's.
check_port() {
	local p
	for p in "${DATA_PORTS[@]}" "${SENTINEL_PORTS[@]}"; do [[ $p == "$1" ]] && return 0; done
	fg_err "sentinel: $1 is neither a data node's port ($FG_SENTINEL_DATA_PORTS) nor a Sentinel's ($FG_SENTINEL_PORTS)"
	exit 2
}

launch_data() {
	local port=$1 dir master replicaof=
	dir=$(node_dir "$port")
	mkdir -p "$dir/data"
	if ! master=$(known_master); then
		master=127.0.0.1:${DATA_PORTS[0]}
	fi
	if [[ $master != "127.0.0.1:$port" ]]; then
		replicaof="replicaof ${master%:*} ${master##*:}"
		fg_log "sentinel: starting data node 127.0.0.1:$port as a replica of $master"
	else
		fg_log "sentinel: starting data node 127.0.0.1:$port as the primary"
	fi
	cat >"$dir/redis.conf" <<EOF
# Generated by deploy/local/sentinel.sh; rewritten at every start, the role
# (replicaof) from the Sentinels' primary at that moment.
bind 127.0.0.1
port $port
protected-mode yes
daemonize no
pidfile "$dir/redis.pid"
logfile "$dir/redis.log"
loglevel notice
dir "$dir/data"
appendonly yes
appendfsync $FG_REDIS_APPENDFSYNC
save ""
$replicaof
EOF
	(cd "$dir" && exec setsid nohup redis-server "$dir/redis.conf") \
		>>"$dir/redis.out" 2>&1 </dev/null 9>&- &
	LAUNCH_PID=$!
}

launch_sentinel() {
	local port=$1 dir master
	dir=$(node_dir "$port")
	mkdir -p "$dir"
	if [[ ! -s $dir/sentinel.conf ]]; then
		if ! master=$(known_master); then
			master=127.0.0.1:${DATA_PORTS[0]}
		fi
		fg_log "sentinel: writing $dir/sentinel.conf (primary $master)"
		cat >"$dir/sentinel.conf.tmp" <<EOF
# Generated by deploy/local/sentinel.sh when missing. Sentinel rewrites it
# with what it learns (its id, the primary after a failover, the replicas,
# the other Sentinels): it is never generated again over it.
bind 127.0.0.1
port $port
protected-mode yes
daemonize no
pidfile "$dir/redis.pid"
logfile "$dir/redis.log"
loglevel notice
dir "$dir"
sentinel monitor $MASTER ${master%:*} ${master##*:} $QUORUM
sentinel down-after-milliseconds $MASTER 2000
sentinel failover-timeout $MASTER 6000
sentinel parallel-syncs $MASTER 1
EOF
		mv "$dir/sentinel.conf.tmp" "$dir/sentinel.conf"
	fi
	(cd "$dir" && exec setsid nohup redis-server "$dir/sentinel.conf" --sentinel) \
		>>"$dir/redis.out" 2>&1 </dev/null 9>&- &
	LAUNCH_PID=$!
}

# launch_if_down PORT: resume the process if it is paused, start it if it
# does not answer; LAUNCHED gets the pid of a process to watch, if any.
launch_if_down() {
	local port=$1 pid
	LAUNCHED=
	if pid=$(node_pid "$port") && paused "$pid"; then
		fg_log "sentinel: 127.0.0.1:$port (pid $pid) was paused; resuming it"
		kill -CONT "$pid"
	fi
	node_ping "$port" && return 0
	if pid=$(node_pid "$port"); then
		fg_log "sentinel: pid $pid on $port is there but does not answer yet; waiting for it"
		LAUNCHED=$pid
		return 0
	fi
	if ! fg_port_closed "$port"; then
		fg_err "sentinel: 127.0.0.1:$port is taken by another program:"
		ss -ltnp "sport = :$port" >&2 2>/dev/null || true
		exit 1
	fi
	if is_sentinel "$port"; then
		fg_log "sentinel: starting Sentinel 127.0.0.1:$port"
		launch_sentinel "$port"
	else
		launch_data "$port"
	fi
	LAUNCHED=$LAUNCH_PID
}

# wait_answers PORT PID: wait until the process answers; fail at once when
# PID exits first.
wait_answers() {
	local port=$1 pid=$2 deadline=$((SECONDS + START_TIMEOUT))
	until node_ping "$port"; do
		if ((SECONDS >= deadline)); then
			fg_err "sentinel: 127.0.0.1:$port did not answer within ${START_TIMEOUT}s"
			fg_tail "$(node_dir "$port")/redis.log" "$(node_dir "$port")/redis.out"
			exit 1
		fi
		if ! fg_alive "$pid" && ! node_pid "$port" >/dev/null; then
			fg_err "sentinel: 127.0.0.1:$port exited during start-up"
			fg_tail "$(node_dir "$port")/redis.log" "$(node_dir "$port")/redis.out"
			exit 1
		fi
		sleep 0.1
	done
}

# start_ports PORT...: launch every one that is down, then wait for each.
start_ports() {
	local port i pids=()
	for port in "$@"; do
		launch_if_down "$port"
		pids+=("$LAUNCHED")
	done
	for i in "${!pids[@]}"; do
		[[ -z ${pids[i]} ]] || wait_answers "${@:i+1:1}" "${pids[i]}"
	done
}

# healthy [-v]: every Sentinel names the same primary; it answers as a
# primary with a replica in sync; every other data node is its replica
# with the link up; each Sentinel sees the primary up, knows the other
# Sentinels and the replicas, none of them down. With -v, say what is
# missing.
healthy() {
	local verbose=${1:-} p q says repl reply flags master='' why=''
	for p in "${SENTINEL_PORTS[@]}"; do
		if ! says=$(sentinel_says "$p"); then
			why="Sentinel $p does not answer"
			break
		fi
		if [[ -z $master ]]; then
			master=$says
		elif [[ $says != "$master" ]]; then
			why="the Sentinels disagree: $master, and $says for $p"
			break
		fi
	done
	if [[ -z $why ]]; then
		if ! repl=$(cli "${master##*:}" info replication) || [[ $(field "$repl" role) != master ]]; then
			why="primary $master does not answer as a primary"
		elif ! grep -q '^slave[0-9]*:.*state=online' <<<"$repl"; then
			why="primary $master has no replica in sync"
		fi
	fi
	if [[ -z $why ]]; then
		for p in "${DATA_PORTS[@]}"; do
			[[ 127.0.0.1:$p != "$master" ]] || continue
			repl=$(cli "$p" info replication) || true
			if [[ $(field "$repl" role) != slave || $(field "$repl" master_port) != "${master##*:}" ||
				$(field "$repl" master_link_status) != up ]]; then
				why="data node $p is not a replica of $master in sync"
				break
			fi
		done
	fi
	if [[ -z $why ]]; then
		for p in "${SENTINEL_PORTS[@]}"; do
			reply=$(cli "$p" sentinel master "$MASTER") || true
			flags=$(value "$reply" flags)
			if [[ $flags != master ]]; then
				why="Sentinel $p: primary $master flags '$flags'"
				break
			fi
			reply=$(port_flags "$(cli "$p" sentinel sentinels "$MASTER")")
			for q in "${SENTINEL_PORTS[@]}"; do
				[[ $q != "$p" ]] || continue
				grep -qx "$q sentinel" <<<"$reply" || why="Sentinel $p does not know Sentinel $q up (${reply:-none})"
			done
			[[ -z $why ]] || break
			reply=$(port_flags "$(cli "$p" sentinel replicas "$MASTER")")
			for q in "${DATA_PORTS[@]}"; do
				[[ 127.0.0.1:$q != "$master" ]] || continue
				grep -qx "$q slave" <<<"$reply" || why="Sentinel $p does not know replica $q up (${reply:-none})"
			done
			[[ -z $why ]] || break
		done
	fi
	[[ -z $why ]] && return 0
	[[ -z $verbose ]] || fg_err "sentinel: not healthy: $why"
	return 1
}

do_start() {
	local t0=$SECONDS port deadline
	need_cmd redis-server redis-cli
	mkdir -p "$FG_SENTINEL_DIR"
	# The data nodes first, their roles from the Sentinels (or their
	# files): the Sentinels then find the primary up and its replica.
	start_ports "${DATA_PORTS[@]}"
	for port in "${DATA_PORTS[@]}"; do
		fg_redis_fsync "$port"
	done
	start_ports "${SENTINEL_PORTS[@]}"
	if healthy; then
		fg_log "sentinel: healthy; primary $(quorum_master), Sentinels $(join_addrs "${SENTINEL_PORTS[@]}")"
		return 0
	fi
	deadline=$((SECONDS + READY_TIMEOUT))
	until healthy; do
		if ((SECONDS >= deadline)); then
			fg_err "sentinel: not healthy within ${READY_TIMEOUT}s"
			healthy -v || true
			do_status >&2 || true
			exit 1
		fi
		sleep 0.2
	done
	fg_log "sentinel: healthy after $((SECONDS - t0))s; primary $(quorum_master), Sentinels $(join_addrs "${SENTINEL_PORTS[@]}")"
}

# wait_closed PORT PID: the process is gone and its port closed.
wait_closed() {
	local port=$1 pid=$2 deadline=$((SECONDS + 10))
	until fg_port_closed "$port"; do
		((SECONDS < deadline)) || {
			fg_err "sentinel: 127.0.0.1:$port still accepts after pid $pid exited"
			return 1
		}
		sleep 0.1
	done
}

# stop_ports PORT...: SIGTERM to each process at once, then wait for each.
stop_ports() {
	local port pid rc=0 stopping=() pids=() i
	for port in "$@"; do
		if pid=$(node_pid "$port"); then
			# A paused process gets the TERM only once it runs again.
			kill -TERM "$pid" 2>/dev/null || true
			kill -CONT "$pid" 2>/dev/null || true
			stopping+=("$port")
			pids+=("$pid")
		elif node_ping "$port"; then
			fg_err "sentinel: 127.0.0.1:$port answers, but not a process started by this script; not stopping it"
			rc=1
		fi
	done
	for i in "${!pids[@]}"; do
		port=${stopping[i]} pid=${pids[i]}
		if ! fg_wait_gone "$pid" "$STOP_TIMEOUT"; then
			fg_err "sentinel: $port (pid $pid) still there after ${STOP_TIMEOUT}s; sending SIGKILL"
			kill -KILL "$pid" 2>/dev/null || true
			fg_wait_gone "$pid" 10 || {
				rc=1
				continue
			}
		fi
		wait_closed "$port" "$pid" || rc=1
	done
	STOPPED=$((STOPPED + ${#pids[@]}))
	return "$rc"
}

do_stop() {
	local rc=0
	STOPPED=0
	# The Sentinels first: they would fail over a primary that stops
	# before them.
	stop_ports "${SENTINEL_PORTS[@]}" || rc=1
	stop_ports "${DATA_PORTS[@]}" || rc=1
	if ((STOPPED)); then
		fg_log "sentinel: stopped"
	else
		fg_log "sentinel: not running"
	fi
	return "$rc"
}

do_kill() {
	local port=$1 pid
	if ! pid=$(node_pid "$port"); then
		fg_log "sentinel: 127.0.0.1:$port is not running"
		return 0
	fi
	kill -KILL "$pid" 2>/dev/null || true
	fg_wait_gone "$pid" 10 || {
		fg_err "sentinel: $port (pid $pid) survives SIGKILL"
		return 1
	}
	wait_closed "$port" "$pid"
	fg_log "sentinel: killed 127.0.0.1:$port (pid $pid)"
}

# signalled PID STOP|CONT: the process is paused (STOP) or runs (CONT).
signalled() {
	if paused "$1"; then
		[[ $2 == STOP ]]
	else
		[[ $2 == CONT ]]
	fi
}

# do_signal PORT STOP|CONT: pause or resume the process; wait until its
# state says so.
do_signal() {
	local port=$1 sig=$2 pid deadline=$((SECONDS + 10))
	if ! pid=$(node_pid "$port"); then
		fg_err "sentinel: 127.0.0.1:$port is not running"
		return 1
	fi
	kill -"$sig" "$pid"
	until signalled "$pid" "$sig"; do
		((SECONDS < deadline)) || {
			fg_err "sentinel: $port (pid $pid) did not take SIG$sig within 10s"
			return 1
		}
		sleep 0.05
	done
	if [[ $sig == STOP ]]; then
		fg_log "sentinel: paused 127.0.0.1:$port (pid $pid)"
	else
		fg_log "sentinel: resumed 127.0.0.1:$port (pid $pid)"
	fi
}

do_status() {
	local port pid repl reply rc=0 m
	for port in "${DATA_PORTS[@]}" "${SENTINEL_PORTS[@]}"; do
		pid=$(node_pid "$port" || echo -)
		if [[ $pid != - ]] && paused "$pid"; then
			fg_log "sentinel: 127.0.0.1:$port pid $pid: paused"
			rc=3
		elif ! node_ping "$port"; then
			fg_log "sentinel: 127.0.0.1:$port: stopped"
			rc=3
		elif is_sentinel "$port"; then
			reply=$(cli "$port" sentinel master "$MASTER") || true
			fg_log "sentinel: Sentinel 127.0.0.1:$port pid $pid: primary $(sentinel_says "$port" || echo '?')" \
				"($(value "$reply" flags)), $(value "$reply" num-slaves) replica(s)," \
				"$(value "$reply" num-other-sentinels) other Sentinel(s) known"
		else
			repl=$(cli "$port" info replication) || true
			if [[ $(field "$repl" role) == master ]]; then
				fg_log "sentinel: data node 127.0.0.1:$port pid $pid: primary with $(field "$repl" connected_slaves) replica(s)"
			else
				fg_log "sentinel: data node 127.0.0.1:$port pid $pid: replica of 127.0.0.1:$(field "$repl" master_port)" \
					"(link $(field "$repl" master_link_status))"
			fi
		fi
	done
	if m=$(quorum_master); then
		fg_log "sentinel: the Sentinels' primary ($MASTER): $m"
	fi
	((rc)) || healthy -v || rc=3
	return "$rc"
}

main() {
	(($# >= 1)) || usage
	local action=$1
	case $action in
	addrs | data-addrs | name | master | status | start | stop | reset)
		(($# == 1)) || usage
		;;
	kill | node-start | pause | resume)
		(($# == 2)) || usage
		check_port "$2"
		;;
	*) usage ;;
	esac
	case $action in
	addrs)
		join_addrs "${SENTINEL_PORTS[@]}"
		return 0
		;;
	data-addrs)
		join_addrs "${DATA_PORTS[@]}"
		return 0
		;;
	name)
		printf '%s\n' "$MASTER"
		return 0
		;;
	master)
		quorum_master || {
			fg_err "sentinel: no $QUORUM Sentinels agree on a primary for $MASTER"
			exit 1
		}
		return 0
		;;
	status)
		do_status || exit $?
		return 0
		;;
	esac
	if [[ $action == stop && ! -d $FG_SENTINEL_DIR ]]; then
		fg_log "sentinel: not running"
		return 0
	fi
	mkdir -p "$FG_SENTINEL_DIR"
	exec 9>"$FG_SENTINEL_DIR/.lock"
	flock -w 600 9 || {
		fg_err "sentinel: could not get $FG_SENTINEL_DIR/.lock within 600s"
		exit 1
	}
	case $action in
	start) do_start ;;
	stop) do_stop || exit 1 ;;
	reset)
		do_stop || exit 1
		local port
		for port in "${DATA_PORTS[@]}" "${SENTINEL_PORTS[@]}"; do rm -rf "$(node_dir "$port")"; done
		do_start
		;;
	kill) do_kill "$2" || exit 1 ;;
	node-start)
		need_cmd redis-server redis-cli
		start_ports "$2"
		fg_log "sentinel: 127.0.0.1:$2 answers"
		;;
	pause) do_signal "$2" STOP || exit 1 ;;
	resume) do_signal "$2" CONT || exit 1 ;;
	esac
}

main "$@"
