# shellcheck shell=bash disable=SC2034
# The one place that says how the local RabbitMQ node is run. Sourced by
# service.sh (start/stop/status) and rabbitmq-cli.sh, so the server and every
# CLI call agree on the node name, the cookie (HOME) and the paths.
#
# Needs FG_RUN (the .run directory) to be set by the caller.

: "${FG_RUN:?FG_RUN must be set before sourcing rabbitmq-env.sh}"

FG_RABBITMQ_DIR="$FG_RUN/rabbitmq"
FG_RABBITMQ_BIN=/usr/lib/rabbitmq/bin   # the real scripts; /usr/sbin/* would `su rabbitmq`
FG_RABBITMQ_PORT=5672
FG_RABBITMQ_DIST_PORT=25672

# HOME is where Erlang finds .erlang.cookie: the server and the CLI tools
# must see the same one.
export HOME="$FG_RABBITMQ_DIR"
export RABBITMQ_NODENAME=flashgate@localhost
export RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
export RABBITMQ_NODE_PORT="$FG_RABBITMQ_PORT"
export RABBITMQ_DIST_PORT="$FG_RABBITMQ_DIST_PORT"
export RABBITMQ_MNESIA_BASE="$FG_RABBITMQ_DIR/mnesia"
export RABBITMQ_LOG_BASE="$FG_RABBITMQ_DIR/log"
export RABBITMQ_PID_FILE="$FG_RABBITMQ_DIR/rabbitmq.pid"
export RABBITMQ_CONFIG_FILE="$FG_RABBITMQ_DIR/rabbitmq.conf"
export RABBITMQ_CONFIG_FILES="$FG_RABBITMQ_DIR/conf.d"
export RABBITMQ_ADVANCED_CONFIG_FILE="$FG_RABBITMQ_DIR/advanced.config"
export RABBITMQ_ENABLED_PLUGINS_FILE="$FG_RABBITMQ_DIR/enabled_plugins"
# Keep /etc/rabbitmq/rabbitmq-env.conf out of it.
export RABBITMQ_CONF_ENV_FILE="$FG_RABBITMQ_DIR/rabbitmq-env.conf"
# epmd (started by the first Erlang node) and the distribution listeners of
# the server and of the CLI tools: loopback only.
export ERL_EPMD_ADDRESS=127.0.0.1
export ERL_EPMD_PORT=4369
export RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
export RABBITMQ_CTL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
export ERL_CRASH_DUMP="$FG_RABBITMQ_DIR/log/erl_crash.dump"
