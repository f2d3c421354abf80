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
# The Sentinels finding the primary, the replica and each other (hello
# messages every 2 s), or a failover settling after a restart.
READY_TIMEOUT=${FG_HA_READY_TIMEOUT:-90}

usage() {
	fg_err "usage: $0 {start|stop|status|addrs|data-addrs|name|master|reset|kill PORT|node-start PORT|pause PORT|resume PORT}"
	exit 2
}

# A node, for lib.sh's fg_*_node(s), is a data node or a Sentinel: a
# Redis server in .run/sentinel/PORT (fg_redis_nodes: node_dir, node_pid,
# node_ping, node_logs, START_TIMEOUT, STOP_TIMEOUT), named by its port.
fg_redis_nodes "$FG_SENTINEL_DIR"
node_name() { printf '127.0.0.1:%s\n' "$1"; }
node_ports() { printf '%s\n' "$1"; }

node_launch() {
	if is_sentinel "$1"; then
		launch_sentinel "$1"
	else
		launch_data "$1"
	fi
}

# is_sentinel PORT: PORT is a Sentinel's (else a data node's).
is_sentinel() { fg_has "$1" "${SENTINEL_PORTS[@]}"; }

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
	out=$(fg_redis_cli "$1" sentinel get-master-addr-by-name "$MASTER") || return 1
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

# check_port PORT: PORT is a data node's or a Sentinel's.
check_port() {
	fg_has "$1" "${DATA_PORTS[@]}" "${SENTINEL_PORTS[@]}" && return 0
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
$(fg_redis_conf "$port" "$dir" "$dir/data")
$replicaof
EOF
	fg_launch "$dir" "$dir/redis.out" redis-server "$dir/redis.conf"
}

launch_sentinel() {
	local port=$1 dir master
	dir=$(node_dir "$port")
	fg_log "sentinel: starting Sentinel 127.0.0.1:$port"
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
$(fg_redis_conf "$port" "$dir")
dir "$dir"
sentinel monitor $MASTER ${master%:*} ${master##*:} $QUORUM
sentinel down-after-milliseconds $MASTER 2000
sentinel failover-timeout $MASTER 6000
sentinel parallel-syncs $MASTER 1
EOF
		mv "$dir/sentinel.conf.tmp" "$dir/sentinel.conf"
	fi
	fg_launch "$dir" "$dir/redis.out" redis-server "$dir/sentinel.conf" --sentinel
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
		if ! repl=$(fg_redis_cli "${master##*:}" info replication) || [[ $(fg_field "$repl" role) != master ]]; then
			why="primary $master does not answer as a primary"
		elif ! grep -q '^slave[0-9]*:.*state=online' <<<"$repl"; then
			why="primary $master has no replica in sync"
		fi
	fi
	if [[ -z $why ]]; then
		for p in "${DATA_PORTS[@]}"; do
			[[ 127.0.0.1:$p != "$master" ]] || continue
			repl=$(fg_redis_cli "$p" info replication) || true
			if [[ $(fg_field "$repl" role) != slave || $(fg_field "$repl" master_port) != "${master##*:}" ||
				$(fg_field "$repl" master_link_status) != up ]]; then
				why="data node $p is not a replica of $master in sync"
				break
			fi
		done
	fi
	if [[ -z $why ]]; then
		for p in "${SENTINEL_PORTS[@]}"; do
			reply=$(fg_redis_cli "$p" sentinel master "$MASTER") || true
			flags=$(value "$reply" flags)
			if [[ $flags != master ]]; then
				why="Sentinel $p: primary $master flags '$flags'"
				break
			fi
			reply=$(port_flags "$(fg_redis_cli "$p" sentinel sentinels "$MASTER")")
			for q in "${SENTINEL_PORTS[@]}"; do
				[[ $q != "$p" ]] || continue
				grep -qx "$q sentinel" <<<"$reply" || why="Sentinel $p does not know Sentinel $q up (${reply:-none})"
			done
			[[ -z $why ]] || break
			reply=$(port_flags "$(fg_redis_cli "$p" sentinel replicas "$MASTER")")
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
	local t0=$SECONDS
	fg_need_cmd redis-server redis-cli
	mkdir -p "$FG_SENTINEL_DIR"
	# The data nodes first, their roles from the Sentinels (or their
	# files): the Sentinels then find the primary up and its replica.
	fg_start_nodes sentinel "${DATA_PORTS[@]}"
	fg_redis_fsync "${DATA_PORTS[@]}"
	fg_start_nodes sentinel "${SENTINEL_PORTS[@]}"
	if healthy; then
		fg_log "sentinel: healthy; primary $(quorum_master), Sentinels $(fg_addrs "${SENTINEL_PORTS[@]}")"
		return 0
	fi
	if ! fg_wait_until "$READY_TIMEOUT" 0.2 healthy; then
		fg_err "sentinel: not healthy within ${READY_TIMEOUT}s"
		healthy -v || true
		do_status >&2 || true
		exit 1
	fi
	fg_log "sentinel: healthy after $((SECONDS - t0))s; primary $(quorum_master), Sentinels $(fg_addrs "${SENTINEL_PORTS[@]}")"
}

do_stop() {
	local rc=0
	STOPPED=0
	# The Sentinels first: they would fail over a primary that stops
	# before them.
	fg_stop_nodes sentinel "${SENTINEL_PORTS[@]}" || rc=1
	fg_stop_nodes sentinel "${DATA_PORTS[@]}" || rc=1
	if ((STOPPED)); then
		fg_log "sentinel: stopped"
	else
		fg_log "sentinel: not running"
	fi
	return "$rc"
}

do_status() {
	local port pid repl reply rc=0 m
	for port in "${DATA_PORTS[@]}" "${SENTINEL_PORTS[@]}"; do
		pid=$(node_pid "$port" || echo -)
		if [[ $pid != - ]] && fg_paused "$pid"; then
			fg_log "sentinel: 127.0.0.1:$port pid $pid: paused"
			rc=3
		elif ! node_ping "$port"; then
			fg_log "sentinel: 127.0.0.1:$port: stopped"
			rc=3
		elif is_sentinel "$port"; then
			reply=$(fg_redis_cli "$port" sentinel master "$MASTER") || true
			fg_log "sentinel: Sentinel 127.0.0.1:$port pid $pid: primary $(sentinel_says "$port" || echo '?')" \
				"($(value "$reply" flags)), $(value "$reply" num-slaves) replica(s)," \
				"$(value "$reply" num-other-sentinels) other Sentinel(s) known"
		else
			repl=$(fg_redis_cli "$port" info replication) || true
			if [[ $(fg_field "$repl" role) == master ]]; then
				fg_log "sentinel: data node 127.0.0.1:$port pid $pid: primary with $(fg_field "$repl" connected_slaves) replica(s)"
			else
				fg_log "sentinel: data node 127.0.0.1:$port pid $pid: replica of 127.0.0.1:$(fg_field "$repl" master_port)" \
					"(link $(fg_field "$repl" master_link_status))"
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
		fg_addrs "${SENTINEL_PORTS[@]}"
		return 0
		;;
	data-addrs)
		fg_addrs "${DATA_PORTS[@]}"
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
	fg_lock sentinel "$FG_SENTINEL_DIR" "$action" || return 0
	case $action in
	start) do_start ;;
	stop) do_stop || exit 1 ;;
	reset)
		do_stop || exit 1
		local port
		for port in "${DATA_PORTS[@]}" "${SENTINEL_PORTS[@]}"; do rm -rf "$(node_dir "$port")"; done
		do_start
		;;
	kill) fg_kill_node sentinel "$2" || exit 1 ;;
	node-start)
		fg_need_cmd redis-server redis-cli
		fg_start_nodes sentinel "$2"
		fg_log "sentinel: 127.0.0.1:$2 answers"
		;;
	pause) fg_signal_node sentinel "$2" STOP || exit 1 ;;
	resume) fg_signal_node sentinel "$2" CONT || exit 1 ;;
	esac
}

main "$@"
