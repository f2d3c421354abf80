#!/usr/bin/env bash
# deploy/local/rabbitmq-cluster.sh {start|stop|status|urls|running N|reset|kill N|node-start N}
#
# A local RabbitMQ cluster of three nodes, fgha1@localhost, fgha2@localhost
# and fgha3@localhost, beside the node of `make up` (flashgate@localhost,
# which it never touches): AMQP on 127.0.0.1, ports FG_RABBITMQ_HA_PORTS of
# stack.env, Erlang distribution on FG_RABBITMQ_HA_DIST_PORTS, registered
# with the same epmd (FG_EPMD_PORT, loopback only). Run as service.sh runs
# the make-up node (the scripts of /usr/lib/rabbitmq/bin as root, plain
# background processes, management plugin off, guest allowed over
# loopback), each node with its database, logs and config under
# .run/rabbitmq-ha/NODE/, the three with an Erlang cookie of their own in
# .run/rabbitmq-ha/.erlang.cookie (their HOME), so that no node of `make
# up` and no CLI call meant for it can reach them, nor they it.
# For the failover tests of `make test-ha` (internal/localstack.HA), which
# kill a node and start it again.
#
#   start       start every node that is not running, all at once (a node
#               of a cluster that was stopped whole waits for its peers as
#               it boots); on first use cluster the three (node 2 and 3:
#               stop_app, join_cluster fgha1@localhost, start_app); wait
#               until each runs and its cluster_status lists the three
#               running. Idempotent.
#   stop        clean shutdown of every node (SIGTERM); data stays
#   status      each node's pid and the running nodes it sees; exit 0 if
#               healthy, 3 if not
#   urls        print amqp://guest:guest@127.0.0.1:PORT/ of each node,
#               comma-separated, as FLASHGATE_AMQP_URL takes them
#   running N   print the running nodes that node N's cluster_status lists,
#               one a line; exit 1 when node N does not answer
#   reset       stop, delete .run/rabbitmq-ha, start: a new, empty cluster
#   kill N      SIGKILL the Erlang VM of node N (1-3): its beam.smp, found
#               by its pid file and checked to be that node's by its
#               environment; returns once it is gone
#   node-start N  start node N again; wait until it runs and is back in
#               the cluster
#
# Every wait is bounded; calls are serialized with a lock.
set -Eeuo pipefail

# shellcheck source=deploy/local/lib.sh
. "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/lib.sh"
trap 'fg_err "$0: failed at line $LINENO: $BASH_COMMAND"' ERR

FG_RABBITMQ_HA_DIR="$FG_RUN/rabbitmq-ha"
IFS=, read -r -a AMQP_PORTS <<<"$FG_RABBITMQ_HA_PORTS"
IFS=, read -r -a DIST_PORTS <<<"$FG_RABBITMQ_HA_DIST_PORTS"
NODES=(1 2 3)
# As service.sh's for RabbitMQ; overridable for slow machines. Three
# nodes boot at once here, beside the make-up one, on a machine of two
# cores.
START_TIMEOUT=${FG_START_TIMEOUT:-180}
STOP_TIMEOUT=${FG_STOP_TIMEOUT:-90}
# A CLI call (an Erlang VM of its own, booted for one question).
CTL_TIMEOUT=60

usage() {
	fg_err "usage: $0 {start|stop|status|urls|running N|reset|kill N|node-start N}"
	exit 2
}

# A node, for lib.sh's fg_*_node(s), is named by its number (node_pid
# and node_launch below).
node_name() { printf 'fgha%s@localhost\n' "$1"; }
node_dir() { printf '%s/fgha%s\n' "$FG_RABBITMQ_HA_DIR" "$1"; }
node_ping() { fg_amqp_ping "$(amqp_port "$1")"; }
node_ports() { printf '%s\n' "$(amqp_port "$1")" "$(dist_port "$1")"; }
node_logs() { printf '%s\n' "$(node_dir "$1")/log/startup.log" "$(node_dir "$1")/log/$(node_name "$1").log"; }
amqp_port() { printf '%s\n' "${AMQP_PORTS[$1 - 1]}"; }
dist_port() { printf '%s\n' "${DIST_PORTS[$1 - 1]}"; }

urls() {
	local n out=()
	for n in "${NODES[@]}"; do
		out+=("amqp://$FG_RABBITMQ_USER:$FG_RABBITMQ_PASSWORD@127.0.0.1:$(amqp_port "$n")/")
	done
	fg_commas "${out[@]}"
}

# node_env N: export node N's environment into this (sub)shell, as
# fg_rabbitmq_env does for the make-up node: the same variables, node N's
# values, the cluster's HOME (its cookie). Call it in the subshell of the
# program only.
node_env() {
	local n=$1 dir
	dir=$(node_dir "$n")
	export HOME="$FG_RABBITMQ_HA_DIR"
	export RABBITMQ_NODENAME
	RABBITMQ_NODENAME=$(node_name "$n")
	export RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
	export RABBITMQ_NODE_PORT
	RABBITMQ_NODE_PORT=$(amqp_port "$n")
	export RABBITMQ_DIST_PORT
	RABBITMQ_DIST_PORT=$(dist_port "$n")
	export RABBITMQ_MNESIA_BASE="$dir/mnesia"
	export RABBITMQ_LOG_BASE="$dir/log"
	export RABBITMQ_PID_FILE="$dir/rabbitmq.pid"
	export RABBITMQ_CONFIG_FILE="$dir/rabbitmq.conf"
	export RABBITMQ_CONFIG_FILES="$dir/conf.d"
	export RABBITMQ_ADVANCED_CONFIG_FILE="$dir/advanced.config"
	export RABBITMQ_ENABLED_PLUGINS_FILE="$dir/enabled_plugins"
	export RABBITMQ_CONF_ENV_FILE="$dir/rabbitmq-env.conf"
	export ERL_EPMD_ADDRESS ERL_EPMD_PORT RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS RABBITMQ_CTL_ERL_ARGS
	export ERL_CRASH_DUMP="$dir/log/erl_crash.dump"
}

# ctl N ARGS...: rabbitmqctl against node N, bounded.
ctl() {
	local n=$1
	shift
	(node_env "$n" && exec timeout "$CTL_TIMEOUT" "$FG_RABBITMQ_BIN/rabbitmqctl" -n "$(node_name "$n")" "$@")
}

# is_node PID N: PID is a beam.smp whose environment names node N (never
# the make-up node, nor another of these).
is_node() {
	[[ "$(cat "/proc/$1/comm" 2>/dev/null)" == beam.smp ]] || return 1
	tr '\0' '\n' <"/proc/$1/environ" 2>/dev/null | grep -qx "RABBITMQ_NODENAME=$(node_name "$2")"
}

# node_pid N: the pid of node N's Erlang VM: its pid file's, else (the
# file is written a moment after the VM starts) any beam.smp of that node.
node_pid() {
	local n=$1 pid f
	if pid=$(fg_pid "$(node_dir "$n")/rabbitmq.pid" beam.smp) && is_node "$pid" "$n"; then
		printf '%s\n' "$pid"
		return 0
	fi
	for f in /proc/[0-9]*/comm; do
		[[ "$(cat "$f" 2>/dev/null)" == beam.smp ]] || continue
		pid=${f#/proc/}
		pid=${pid%/comm}
		if is_node "$pid" "$n" && fg_alive "$pid"; then
			printf '%s\n' "$pid"
			return 0
		fi
	done
	return 1
}

# cluster_nodes N KIND: the nodes of KIND (running_nodes, disk_nodes) in
# node N's cluster_status, one a line.
cluster_nodes() {
	local json
	json=$(ctl "$1" cluster_status --formatter json 2>/dev/null) || return 1
	sed -n "s/.*\"$2\":\[\([^]]*\)\].*/\1/p" <<<"$json" | tr ',' '\n' | tr -d '"' | sed '/^$/d' | sort
}

# clustered N: node N runs and sees the three running.
clustered() {
	local want have
	want=$(for m in "${NODES[@]}"; do node_name "$m"; done | sort)
	have=$(cluster_nodes "$1" running_nodes) || return 1
	[[ $have == "$want" ]]
}

# healthy [-v]: every node answers AMQP and its cluster_status lists the
# three running (the three asked at once: a CLI call costs a second or
# two). With -v, say which is not.
healthy() {
	local n pids=() rc=0 verbose=${1:-}
	for n in "${NODES[@]}"; do
		if ! node_ping "$n"; then
			[[ -z $verbose ]] || fg_err "rabbitmq-ha: $(node_name "$n") does not answer on 127.0.0.1:$(amqp_port "$n")"
			return 1
		fi
	done
	for n in "${NODES[@]}"; do
		clustered "$n" &
		pids+=($!)
	done
	for n in "${!pids[@]}"; do
		if ! wait "${pids[n]}"; then
			rc=1
			[[ -z $verbose ]] || fg_err "rabbitmq-ha: $(node_name "${NODES[n]}") does not see the three running" \
				"(running: $(cluster_nodes "${NODES[n]}" running_nodes | paste -sd' ' || echo '?'))"
		fi
	done
	return "$rc"
}

# check_node N: N is 1, 2 or 3.
check_node() {
	[[ $1 =~ ^[1-3]$ ]] || {
		fg_err "rabbitmq-ha: node $1: want 1, 2 or 3"
		exit 2
	}
}

node_launch() {
	local n=$1 dir
	dir=$(node_dir "$n")
	fg_log "rabbitmq-ha: starting $(node_name "$n") on 127.0.0.1:$(amqp_port "$n")"
	mkdir -p "$dir/mnesia" "$dir/log" "$dir/conf.d"
	: >"$dir/rabbitmq-env.conf"
	echo '[].' >"$dir/enabled_plugins"
	cat >"$dir/rabbitmq.conf" <<EOF
# Generated by deploy/local/rabbitmq-cluster.sh; rewritten at every start.
$(fg_rabbitmq_conf "$(amqp_port "$n")")
EOF
	# The three nodes' HOME, a cookie of their own.
	fg_erlang_cookie "$FG_RABBITMQ_HA_DIR/.erlang.cookie"
	# As service.sh's launch_rabbitmq: rabbitmq-server execs erl, which
	# execs beam.smp: LAUNCH_PID is the node's pid.
	(cd "$dir" && node_env "$n" && exec setsid nohup "$FG_RABBITMQ_BIN/rabbitmq-server") \
		>>"$dir/log/startup.log" 2>&1 </dev/null 9>&- &
	LAUNCH_PID=$!
}

# join N: cluster node N with node 1 unless it already is (its disk nodes
# name node 1).
join() {
	local n=$1 first
	first=$(node_name "${NODES[0]}")
	if cluster_nodes "$n" disk_nodes | grep -qx "$first"; then
		return 0
	fi
	fg_log "rabbitmq-ha: joining $(node_name "$n") to $first"
	local step
	for step in stop_app "join_cluster $first" start_app; do
		# shellcheck disable=SC2086 # the step's words
		if ! ctl "$n" $step >>"$FG_RABBITMQ_HA_DIR/join.log" 2>&1; then
			fg_err "rabbitmq-ha: rabbitmqctl -n $(node_name "$n") $step failed"
			fg_tail "$FG_RABBITMQ_HA_DIR/join.log"
			exit 1
		fi
	done
}

do_start() {
	local t0=$SECONDS n
	fg_need_cmd "$FG_RABBITMQ_BIN/rabbitmq-server" "$FG_RABBITMQ_BIN/rabbitmqctl" erl
	fg_start_nodes rabbitmq-ha "${NODES[@]}"
	if healthy; then
		fg_log "rabbitmq-ha: running, clustered, on $(urls)"
		return 0
	fi
	for n in "${NODES[@]:1}"; do
		join "$n"
	done
	if ! fg_wait_until "$START_TIMEOUT" 1 healthy; then
		fg_err "rabbitmq-ha: the three nodes running and clustered not within ${START_TIMEOUT}s"
		healthy -v || true
		exit 1
	fi
	fg_log "rabbitmq-ha: running, clustered, on $(urls) after $((SECONDS - t0))s"
}

do_stop() {
	local t0=$SECONDS rc=0
	STOPPED=0
	fg_stop_nodes rabbitmq-ha "${NODES[@]}" || rc=1
	if ((STOPPED)); then
		fg_log "rabbitmq-ha: stopped after $((SECONDS - t0))s"
	else
		fg_log "rabbitmq-ha: not running"
	fi
	return "$rc"
}

# do_kill N: as fg_kill_node, but a node that answers without a process of
# ours is an error.
do_kill() {
	fg_foreign_node rabbitmq-ha "$1" && return 1
	fg_kill_node rabbitmq-ha "$1"
}

# do_node_start N: start node N; wait until it runs and sees the three
# running (it rejoins by itself: its database says it is a member).
do_node_start() {
	local n=$1 t0=$SECONDS
	fg_start_nodes rabbitmq-ha "$n"
	if ! fg_wait_until "$START_TIMEOUT" 1 clustered "$n"; then
		fg_err "rabbitmq-ha: $(node_name "$n") runs but does not see the three running within ${START_TIMEOUT}s" \
			"(running: $(cluster_nodes "$n" running_nodes | paste -sd' ' || echo '?'))"
		exit 1
	fi
	fg_log "rabbitmq-ha: $(node_name "$n") runs and is back in the cluster after $((SECONDS - t0))s"
}

do_status() {
	local n pid rc=0
	for n in "${NODES[@]}"; do
		pid=$(node_pid "$n" || echo -)
		if node_ping "$n"; then
			fg_log "rabbitmq-ha: $(node_name "$n") pid $pid on 127.0.0.1:$(amqp_port "$n"): sees running" \
				"$(cluster_nodes "$n" running_nodes | paste -sd' ' || echo '?')"
		else
			fg_log "rabbitmq-ha: $(node_name "$n"): stopped"
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
	urls | status | start | stop | reset)
		(($# == 1)) || usage
		;;
	kill | node-start | running)
		(($# == 2)) || usage
		check_node "$2"
		;;
	*) usage ;;
	esac
	case $action in
	urls)
		urls
		return 0
		;;
	status)
		do_status || exit $?
		return 0
		;;
	running)
		cluster_nodes "$2" running_nodes || {
			fg_err "rabbitmq-ha: $(node_name "$2") does not answer rabbitmqctl cluster_status"
			exit 1
		}
		return 0
		;;
	esac
	fg_lock rabbitmq-ha "$FG_RABBITMQ_HA_DIR" "$action" || return 0
	case $action in
	start) do_start ;;
	stop) do_stop || exit 1 ;;
	reset)
		do_stop || exit 1
		local n
		for n in "${NODES[@]}"; do rm -rf "$(node_dir "$n")"; done
		rm -f "$FG_RABBITMQ_HA_DIR/join.log"
		do_start
		;;
	kill) do_kill "$2" || exit 1 ;;
	node-start) do_node_start "$2" ;;
	esac
}

main "$@"
