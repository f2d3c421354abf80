# shellcheck shell=bash disable=SC2034
# The one place that says how the local RabbitMQ node is run. Sourced (through
# lib.sh) by service.sh (start/stop/status) and rabbitmq-cli.sh, so the server
# and every CLI call agree on the node name, the cookie (HOME) and the paths.
#
# Needs FG_RUN (the .run directory) and the ports of stack.env to be set by
# the caller. It sets shell variables only: fg_rabbitmq_env exports them,
# HOME included, in the (sub)shell that is about to run a RabbitMQ program,
# and nowhere else (up.sh's apt-get must keep the caller's HOME).

: "${FG_RUN:?FG_RUN must be set before sourcing rabbitmq-env.sh}"
: "${FG_RABBITMQ_PORT:?source stack.env before rabbitmq-env.sh}"

FG_RABBITMQ_DIR="$FG_RUN/rabbitmq"
FG_RABBITMQ_BIN=/usr/lib/rabbitmq/bin   # the real scripts; /usr/sbin/* would `su rabbitmq`

RABBITMQ_NODENAME=flashgate@localhost
RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
RABBITMQ_NODE_PORT="$FG_RABBITMQ_PORT"
RABBITMQ_DIST_PORT="$FG_RABBITMQ_DIST_PORT"
RABBITMQ_MNESIA_BASE="$FG_RABBITMQ_DIR/mnesia"
RABBITMQ_LOG_BASE="$FG_RABBITMQ_DIR/log"
RABBITMQ_PID_FILE="$FG_RABBITMQ_DIR/rabbitmq.pid"
RABBITMQ_CONFIG_FILE="$FG_RABBITMQ_DIR/rabbitmq.conf"
RABBITMQ_CONFIG_FILES="$FG_RABBITMQ_DIR/conf.d"
RABBITMQ_ADVANCED_CONFIG_FILE="$FG_RABBITMQ_DIR/advanced.config"
RABBITMQ_ENABLED_PLUGINS_FILE="$FG_RABBITMQ_DIR/enabled_plugins"
# Keep /etc/rabbitmq/rabbitmq-env.conf out of it.
RABBITMQ_CONF_ENV_FILE="$FG_RABBITMQ_DIR/rabbitmq-env.conf"
# epmd (started by the first Erlang node) and the distribution listeners of
# the server and of the CLI tools: loopback only.
ERL_EPMD_ADDRESS=127.0.0.1
ERL_EPMD_PORT="$FG_EPMD_PORT"
RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
RABBITMQ_CTL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
ERL_CRASH_DUMP="$FG_RABBITMQ_DIR/log/erl_crash.dump"

# fg_rabbitmq_env: export the node's environment into this shell, for the
# RabbitMQ program it runs next. HOME is where Erlang finds .erlang.cookie:
# the server and the CLI tools must see the same one. Call it in the
# subshell (or the exec'ing script) of that program only.
fg_rabbitmq_env() {
	export HOME="$FG_RABBITMQ_DIR" RABBITMQ_NODENAME RABBITMQ_NODE_IP_ADDRESS RABBITMQ_NODE_PORT \
		RABBITMQ_DIST_PORT RABBITMQ_MNESIA_BASE RABBITMQ_LOG_BASE RABBITMQ_PID_FILE RABBITMQ_CONFIG_FILE \
		RABBITMQ_CONFIG_FILES RABBITMQ_ADVANCED_CONFIG_FILE RABBITMQ_ENABLED_PLUGINS_FILE \
		RABBITMQ_CONF_ENV_FILE ERL_EPMD_ADDRESS ERL_EPMD_PORT RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS \
		RABBITMQ_CTL_ERL_ARGS ERL_CRASH_DUMP
}
