#!/usr/bin/env bash
# deploy/local/rabbitmq-cli.sh TOOL [ARGS...]: run a RabbitMQ CLI tool against
# the local node, with the same environment (node name, cookie) as the server.
#   deploy/local/rabbitmq-cli.sh rabbitmq-diagnostics status
#   deploy/local/rabbitmq-cli.sh rabbitmqctl list_queues name messages
set -euo pipefail

# shellcheck source=deploy/local/lib.sh
. "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/lib.sh"

tool=${1:-}
case $tool in
rabbitmqctl | rabbitmq-diagnostics | rabbitmq-queues | rabbitmq-plugins | rabbitmq-upgrade | rabbitmq-streams) shift ;;
*)
	echo "usage: $0 {rabbitmqctl|rabbitmq-diagnostics|rabbitmq-queues|rabbitmq-plugins|rabbitmq-upgrade|rabbitmq-streams} [args...]" >&2
	exit 2
	;;
esac
fg_rabbitmq_env
exec "$FG_RABBITMQ_BIN/$tool" "$@"
