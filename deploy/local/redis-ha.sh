#!/usr/bin/env bash
# deploy/local/redis-ha.sh {start|stop|status|addrs|reset|kill PORT|node-start PORT|pause PORT|resume PORT}
#
# A local Redis Cluster with replicas on 127.0.0.1: three primaries and one
# replica each, ports FG_REDIS_HA_PORTS of stack.env (cluster bus: port +
# 10000), from the same redis-server package as `make up`'s Redis, as plain
# background processes with their data under .run/redis-ha/PORT/. Where
# cluster.sh's cluster (three primaries, no replicas) is the one the tests
# share, this one is for failover: its nodes are killed, paused and
# restarted by the tests of `make test-ha` (internal/localstack.HA), and a
# dead primary's replica takes over its slots.
#
# Node settings that make a failover quick and certain on one machine:
# cluster-node-timeout 2000 (a silent primary is failed after 2 s),
# cluster-require-full-coverage no (the other primaries keep serving their
# slots while one is down), cluster-replica-validity-factor 0 (a replica is
# promoted whatever its lag: here the choice is between a stale replica
# and no primary at all).
#
#   start       start every node that does not answer (and resume one that
#               was paused); on first use form the cluster (redis-cli
#               --cluster create --cluster-replicas 1); wait until healthy.
#               Idempotent. A node that was killed comes back as a replica
#               of whoever is its shard's primary now (Redis Cluster sees
#               to that itself).
#   stop        clean shutdown of every node (SIGTERM, to all at once, so
#               that no replica takes over while its primary stops); the
#               cluster and its data stay in .run/redis-ha
#   status      each node's pid, role and cluster state; exit 0 if healthy,
#               3 if not
#   addrs       print the six nodes' addresses, comma-separated, as
#               FLASHGATE_REDIS_ADDRS takes them
#   reset       stop, delete .run/redis-ha, start: a new, empty cluster
#   kill PORT   SIGKILL the node on PORT (a crash: no last AOF write);
#               returns once the process is gone
#   node-start PORT  start that one node again; wait until it answers
#   pause PORT  SIGSTOP the node (alive, silent: a hung machine)
#   resume PORT SIGCONT it
#
# Healthy: every node answers and says cluster_state:ok, knows the six
# nodes and sees all 16384 slots served by a live primary; there are three
# primaries, each serving slots, each with a replica whose link is up.
# Which port is a primary does not matter: after a failover the roles have
# moved, and they stay moved.
#
# Every wait is bounded; calls are serialized with a lock.
set -Eeuo pipefail

# shellcheck source=deploy/local/lib.sh
. "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/lib.sh"
trap 'fg_err "$0: failed at line $LINENO: $BASH_COMMAND"' ERR

FG_REDIS_HA_DIR="$FG_RUN/redis-ha"
IFS=, read -r -a PORTS <<<"$FG_REDIS_HA_PORTS"
# Overridable for slow machines, as in service.sh.
START_TIMEOUT=${FG_START_TIMEOUT:-30}
STOP_TIMEOUT=${FG_STOP_TIMEOUT:-30}
# Forming the cluster, the first syncs of the replicas, or the nodes
# finding each other (and a failover settling) after a restart.
READY_TIMEOUT=${FG_HA_READY_TIMEOUT:-90}

usage() {
	fg_err "usage: $0 {start|stop|status|addrs|reset|kill PORT|node-start PORT|pause PORT|resume PORT}"
	exit 2
}

addrs() {
	local p out=()
	for p in "${PORTS[@]}"; do out+=("127.0.0.1:$p"); done
	(
		IFS=,
		printf '%s\n' "${out[*]}"
	)
}

node_dir() { printf '%s\n' "$FG_REDIS_HA_DIR/$1"; }

node_pid() { fg_pid "$(node_dir "$1")/redis.pid" redis-server; }

# paused PID: the process is stopped (SIGSTOP): state T in /proc.
paused() {
	local stat
	stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	stat=${stat##*) }
	[[ ${stat%% *} == T ]]
}

cli() { timeout 3 redis-cli -h 127.0.0.1 -p "$@" 2>/dev/null; }

node_ping() { [[ "$(cli "$1" ping)" == PONG ]]; }

# node_info PORT: CLUSTER INFO of the node, CRs removed; fails when it does
# not answer.
node_info() {
	local out
	out=$(cli "$1" cluster info) || return 1
	[[ $out == *cluster_state:* ]] || return 1
	printf '%s\n' "${out//$'\r'/}"
}

# node_repl PORT: INFO replication of the node, CRs removed.
node_repl() {
	local out
	out=$(cli "$1" info replication) || return 1
	[[ $out == *role:* ]] || return 1
	printf '%s\n' "${out//$'\r'/}"
}

# field INFO NAME: the value of NAME in an INFO or CLUSTER INFO answer.
field() { sed -n "s/^$2:\(.*\)\$/\1/p" <<<"$1"; }

# own_slots PORT: the slot ranges the node serves, from its own line of
# CLUSTER NODES (fields 9 on); empty when none.
own_slots() {
	cli "$1" cluster nodes | awk '$3 ~ /myself/ { for (i = 9; i <= NF; i++) printf "%s ", $i }'
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

# check_port PORT: PORT is one of the nodes'.
check_port() {
	local p
	for p in "${PORTS[@]}"; do [[ $p == "$1" ]] && return 0; done
	fg_err "redis-ha: $1 is not a node's port (FG_REDIS_HA_PORTS=$FG_REDIS_HA_PORTS)"
	exit 2
}

launch_node() {
	local port=$1 dir
	dir=$(node_dir "$port")
	mkdir -p "$dir/data"
	cat >"$dir/redis.conf" <<EOF
# Generated by deploy/local/redis-ha.sh; rewritten at every start. The
# node's own view of the cluster (its id, its role, its peers, the slots)
# is in data/nodes.conf, which the node writes.
bind 127.0.0.1
port $port
protected-mode yes
daemonize no
pidfile "$dir/redis.pid"
logfile "$dir/redis.log"
loglevel notice
dir "$dir/data"
cluster-enabled yes
cluster-config-file nodes.conf
cluster-node-timeout 2000
cluster-require-full-coverage no
cluster-replica-validity-factor 0
appendonly yes
appendfsync $FG_REDIS_APPENDFSYNC
save ""
EOF
	# Same as service.sh's Redis: its own session, the lock fd closed, the
	# pid we get is the server's.
	(cd "$dir" && exec setsid nohup redis-server "$dir/redis.conf") \
		>>"$dir/redis.out" 2>&1 </dev/null 9>&- &
	LAUNCH_PID=$!
}

# launch_if_down PORT: resume the node if it is paused, start it if it does
# not answer; LAUNCHED gets the pid of a process to watch, if any.
launch_if_down() {
	local port=$1 pid p
	LAUNCHED=
	if pid=$(node_pid "$port") && paused "$pid"; then
		fg_log "redis-ha: node 127.0.0.1:$port (pid $pid) was paused; resuming it"
		kill -CONT "$pid"
	fi
	node_ping "$port" && return 0
	if pid=$(node_pid "$port"); then
		fg_log "redis-ha: pid $pid of node $port is there but does not answer yet; waiting for it"
		LAUNCHED=$pid
		return 0
	fi
	for p in "$port" $((port + 10000)); do
		if ! fg_port_closed "$p"; then
			fg_err "redis-ha: 127.0.0.1:$p is taken by another program:"
			ss -ltnp "sport = :$p" >&2 2>/dev/null || true
			exit 1
		fi
	done
	fg_log "redis-ha: starting node 127.0.0.1:$port"
	launch_node "$port"
	LAUNCHED=$LAUNCH_PID
}

# wait_answers PORT PID: wait until the node answers; fail at once when
# PID (its process) exits first.
wait_answers() {
	local port=$1 pid=$2 deadline=$((SECONDS + START_TIMEOUT))
	until node_ping "$port"; do
		if ((SECONDS >= deadline)); then
			fg_err "redis-ha: node 127.0.0.1:$port did not answer within ${START_TIMEOUT}s"
			fg_tail "$(node_dir "$port")/redis.log" "$(node_dir "$port")/redis.out"
			exit 1
		fi
		if ! fg_alive "$pid" && ! node_pid "$port" >/dev/null; then
			fg_err "redis-ha: node 127.0.0.1:$port exited during start-up"
			fg_tail "$(node_dir "$port")/redis.log" "$(node_dir "$port")/redis.out"
			exit 1
		fi
		sleep 0.1
	done
}

# start_nodes PORT...: launch every one that is down, then wait for each.
start_nodes() {
	local port i pids=()
	for port in "$@"; do
		launch_if_down "$port"
		pids+=("$LAUNCHED")
	done
	for i in "${!pids[@]}"; do
		[[ -z ${pids[i]} ]] || wait_answers "${@:i+1:1}" "${pids[i]}"
	done
}

# healthy [-v]: see the header. With -v, say what is missing.
healthy() {
	local verbose=${1:-} port info repl role primaries=0 why=
	for port in "${PORTS[@]}"; do
		if ! info=$(node_info "$port") || ! repl=$(node_repl "$port"); then
			why="node $port does not answer"
			break
		fi
		if [[ $(field "$info" cluster_state) != ok || $(field "$info" cluster_known_nodes) != "${#PORTS[@]}" ||
			$(field "$info" cluster_slots_ok) != 16384 ]]; then
			why="node $port: cluster_state $(field "$info" cluster_state), $(field "$info" cluster_known_nodes) nodes known, $(field "$info" cluster_slots_ok) slots ok"
			break
		fi
		role=$(field "$repl" role)
		if [[ $role == master ]]; then
			primaries=$((primaries + 1))
			if ! grep -q '^slave[0-9]*:.*state=online' <<<"$repl"; then
				why="primary $port has no replica in sync"
				break
			fi
			if [[ -z $(own_slots "$port") ]]; then
				why="primary $port serves no slot"
				break
			fi
		elif [[ $(field "$repl" master_link_status) != up ]]; then
			why="replica $port: link to its primary $(field "$repl" master_port) is $(field "$repl" master_link_status)"
			break
		fi
	done
	if [[ -z $why ]] && ((primaries != ${#PORTS[@]} / 2)); then
		why="$primaries primaries, want $((${#PORTS[@]} / 2))"
	fi
	[[ -z $why ]] && return 0
	[[ -z $verbose ]] || fg_err "redis-ha: not healthy: $why"
	return 1
}

# fresh: no node has joined a cluster or been given a slot yet.
fresh() {
	local port info
	for port in "${PORTS[@]}"; do
		info=$(node_info "$port") || return 1
		[[ $(field "$info" cluster_known_nodes) == 1 && $(field "$info" cluster_slots_assigned) == 0 ]] || return 1
	done
}

# formed: every node knows every other and all slots are assigned; after a
# restart such a cluster becomes healthy by itself once the nodes have
# talked (and a replica whose primary stays away has taken over).
formed() {
	local port info
	for port in "${PORTS[@]}"; do
		info=$(node_info "$port") || return 1
		[[ $(field "$info" cluster_known_nodes) == "${#PORTS[@]}" &&
			$(field "$info" cluster_slots_assigned) == 16384 ]] || return 1
	done
}

do_start() {
	local t0=$SECONDS port deadline
	need_cmd redis-server redis-cli
	mkdir -p "$FG_REDIS_HA_DIR"
	start_nodes "${PORTS[@]}"
	for port in "${PORTS[@]}"; do
		fg_redis_fsync "$port"
	done
	if healthy; then
		fg_log "redis-ha: healthy on $(addrs)"
		return 0
	fi
	if fresh; then
		local nodes=()
		for port in "${PORTS[@]}"; do nodes+=("127.0.0.1:$port"); done
		fg_log "redis-ha: creating a cluster of $((${#PORTS[@]} / 2)) primaries with a replica each"
		if ! timeout 60 redis-cli --cluster create "${nodes[@]}" --cluster-replicas 1 --cluster-yes \
			>"$FG_REDIS_HA_DIR/create.log" 2>&1; then
			fg_err "redis-ha: redis-cli --cluster create failed"
			fg_tail "$FG_REDIS_HA_DIR/create.log"
			exit 1
		fi
	elif ! formed; then
		fg_err "redis-ha: the nodes on $(addrs) are neither a new cluster nor one formed cluster"
		fg_err "(a node's data was removed, or another program answers there); '$0 reset' starts an empty one"
		do_status >&2 || true
		exit 1
	fi
	deadline=$((SECONDS + READY_TIMEOUT))
	until healthy; do
		if ((SECONDS >= deadline)); then
			fg_err "redis-ha: not healthy within ${READY_TIMEOUT}s"
			healthy -v || true
			do_status >&2 || true
			exit 1
		fi
		sleep 0.2
	done
	fg_log "redis-ha: healthy on $(addrs) after $((SECONDS - t0))s"
}

# wait_closed PORT PID: the process is gone and its port closed.
wait_closed() {
	local port=$1 pid=$2 deadline=$((SECONDS + 10))
	until fg_port_closed "$port"; do
		((SECONDS < deadline)) || {
			fg_err "redis-ha: 127.0.0.1:$port still accepts after pid $pid exited"
			return 1
		}
		sleep 0.1
	done
}

do_stop() {
	local port pid rc=0 stopping=() pids=() i
	for port in "${PORTS[@]}"; do
		if pid=$(node_pid "$port"); then
			# A paused node gets the TERM only once it runs again.
			kill -TERM "$pid" 2>/dev/null || true
			kill -CONT "$pid" 2>/dev/null || true
			stopping+=("$port")
			pids+=("$pid")
		elif node_ping "$port"; then
			fg_err "redis-ha: 127.0.0.1:$port answers, but not a node started by this script; not stopping it"
			rc=1
		fi
	done
	for i in "${!pids[@]}"; do
		port=${stopping[i]} pid=${pids[i]}
		if ! fg_wait_gone "$pid" "$STOP_TIMEOUT"; then
			fg_err "redis-ha: node $port (pid $pid) still there after ${STOP_TIMEOUT}s; sending SIGKILL"
			kill -KILL "$pid" 2>/dev/null || true
			fg_wait_gone "$pid" 10 || {
				rc=1
				continue
			}
		fi
		wait_closed "$port" "$pid" || rc=1
	done
	if ((${#pids[@]})); then
		fg_log "redis-ha: stopped"
	else
		fg_log "redis-ha: not running"
	fi
	return "$rc"
}

do_kill() {
	local port=$1 pid
	if ! pid=$(node_pid "$port"); then
		fg_log "redis-ha: node 127.0.0.1:$port is not running"
		return 0
	fi
	kill -KILL "$pid" 2>/dev/null || true
	fg_wait_gone "$pid" 10 || {
		fg_err "redis-ha: node $port (pid $pid) survives SIGKILL"
		return 1
	}
	wait_closed "$port" "$pid"
	fg_log "redis-ha: killed node 127.0.0.1:$port (pid $pid)"
}

# signalled PID STOP|CONT: the process is paused (STOP) or runs (CONT).
signalled() {
	if paused "$1"; then
		[[ $2 == STOP ]]
	else
		[[ $2 == CONT ]]
	fi
}

# do_signal PORT STOP|CONT: pause or resume the node; wait until its state
# says so.
do_signal() {
	local port=$1 sig=$2 pid deadline=$((SECONDS + 10))
	if ! pid=$(node_pid "$port"); then
		fg_err "redis-ha: node 127.0.0.1:$port is not running"
		return 1
	fi
	kill -"$sig" "$pid"
	until signalled "$pid" "$sig"; do
		((SECONDS < deadline)) || {
			fg_err "redis-ha: node $port (pid $pid) did not take SIG$sig within 10s"
			return 1
		}
		sleep 0.05
	done
	if [[ $sig == STOP ]]; then
		fg_log "redis-ha: paused node 127.0.0.1:$port (pid $pid)"
	else
		fg_log "redis-ha: resumed node 127.0.0.1:$port (pid $pid)"
	fi
}

do_status() {
	local port info repl pid state rc=0
	for port in "${PORTS[@]}"; do
		pid=$(node_pid "$port" || echo -)
		if [[ $pid != - ]] && paused "$pid"; then
			fg_log "redis-ha: node 127.0.0.1:$port pid $pid: paused"
			rc=3
		elif info=$(node_info "$port") && repl=$(node_repl "$port"); then
			if [[ $(field "$repl" role) == master ]]; then
				state="primary of slots $(own_slots "$port")with $(field "$repl" connected_slaves) replica(s)"
			else
				state="replica of 127.0.0.1:$(field "$repl" master_port) (link $(field "$repl" master_link_status))"
			fi
			fg_log "redis-ha: node 127.0.0.1:$port pid $pid: $state; cluster_state $(field "$info" cluster_state)," \
				"$(field "$info" cluster_known_nodes) nodes known, $(field "$info" cluster_slots_ok) slots ok"
		else
			fg_log "redis-ha: node 127.0.0.1:$port: stopped"
			rc=3
		fi
	done
	((rc)) || healthy -v || rc=3
	return "$rc"
}

main() {
	(($# >= 1)) || usage
	local action=$1
	case $action in
	addrs | status | start | stop | reset)
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
		addrs
		return 0
		;;
	status)
		do_status || exit $?
		return 0
		;;
	esac
	# `make down` on a machine that never ran it: nothing to stop, and no
	# folder to leave behind.
	if [[ $action == stop && ! -d $FG_REDIS_HA_DIR ]]; then
		fg_log "redis-ha: not running"
		return 0
	fi
	mkdir -p "$FG_REDIS_HA_DIR"
	exec 9>"$FG_REDIS_HA_DIR/.lock"
	flock -w 600 9 || {
		fg_err "redis-ha: could not get $FG_REDIS_HA_DIR/.lock within 600s"
		exit 1
	}
	case $action in
	start) do_start ;;
	stop) do_stop || exit 1 ;;
	reset)
		do_stop || exit 1
		local port
		for port in "${PORTS[@]}"; do rm -rf "$(node_dir "$port")"; done
		rm -f "$FG_REDIS_HA_DIR/create.log"
		do_start
		;;
	kill) do_kill "$2" || exit 1 ;;
	node-start)
		need_cmd redis-server redis-cli
		start_nodes "$2"
		fg_log "redis-ha: node 127.0.0.1:$2 answers"
		;;
	pause) do_signal "$2" STOP || exit 1 ;;
	resume) do_signal "$2" CONT || exit 1 ;;
	esac
}

main "$@"
