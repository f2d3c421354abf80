#!/usr/bin/env bash
# deploy/local/nginx.sh: nginx (Debian's, 1.22) as the project's own process,
# on loopback, in front of local gateways.
#
#   nginx.sh install            install the nginx package when missing (the
#                               packaged service is never started)
#   nginx.sh conf DIR LISTEN GATEWAY...
#                               write DIR/nginx.conf: deploy/nginx.conf made
#                               local (see below), listening on LISTEN
#                               (127.0.0.1:PORT), balancing over GATEWAY...
#                               (host:port); its pid, logs and temp files
#                               under DIR
#   nginx.sh start DIR          nginx -c DIR/nginx.conf, in the background
#                               (daemon); waits until it answers
#   nginx.sh stop DIR           stop it (SIGQUIT, graceful), SIGTERM after 10s
#
# The local config is deploy/nginx.conf with only what must differ for a
# process on loopback changed (deploy/nginxlocal_test.go holds the rest
# equal): no Docker resolver, upstream servers by address without `resolve`
# (nginx 1.22 lacks it), the public listen address, the status server on
# LISTEN's port + 10 (nothing else may take 8090 on a shared machine), and
# pid, logs and temp paths under DIR.
set -Eeuo pipefail

# shellcheck source=deploy/local/lib.sh
. "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/lib.sh"
trap 'fg_err "$0: failed at line $LINENO: $BASH_COMMAND"' ERR

FG_NGINX=${FG_NGINX:-/usr/sbin/nginx}

install_nginx() {
	[[ -x $FG_NGINX ]] && return 0
	fg_log "installing nginx"
	# nginx-light would do too; `nginx` is Debian's plain one (stub_status,
	# upstream zone and keepalive are all in it).
	fg_apt_install --no-install-recommends nginx
	[[ -x $FG_NGINX ]]
}

# conf DIR LISTEN GATEWAY...: render the local config from deploy/nginx.conf.
conf() {
	local dir=$1 listen=$2
	shift 2
	(($# > 0)) || {
		fg_err "nginx.sh conf: no gateway"
		exit 2
	}
	[[ $listen == 127.*:* ]] || {
		fg_err "nginx.sh conf: listen $listen: want 127.x.x.x:PORT"
		exit 2
	}
	dir=$(mkdir -p "$dir" && cd "$dir" && pwd)
	mkdir -p "$dir/logs" "$dir/temp"
	local status="127.0.0.1:$((${listen##*:} + 10))"
	local servers="" g
	for g in "$@"; do
		servers+="        server $g max_fails=3 fail_timeout=5s;\n"
	done
	# Each change is one line of the shipped file, matched whole, so that a
	# change there that this does not know fails the test, not silently.
	awk -v dir="$dir" -v listen="$listen" -v status="$status" -v servers="$servers" '
		/^# deploy\/nginx.conf:/ { print "# Rendered by deploy/local/nginx.sh from deploy/nginx.conf: do not edit."; next }
		/^pid \/tmp\/nginx.pid;$/ { print "pid " dir "/nginx.pid;"; next }
		/^error_log \/dev\/stderr notice;$/ { print "error_log " dir "/logs/error.log notice;"; next }
		/^    resolver / || /^    resolver_timeout / { next }
		/^    access_log \/dev\/stdout upstream;$/ {
			print "    access_log " dir "/logs/access.log upstream;"
			print "    client_body_temp_path " dir "/temp/client_body;"
			print "    proxy_temp_path " dir "/temp/proxy;"
			print "    fastcgi_temp_path " dir "/temp/fastcgi;"
			print "    uwsgi_temp_path " dir "/temp/uwsgi;"
			print "    scgi_temp_path " dir "/temp/scgi;"
			next
		}
		/^        server gateway-1:8080 resolve / { printf "%s", servers; next }
		/^        server gateway-[0-9]+:8080 resolve / { next }
		/^        listen 8080 backlog=4096;$/ { print "        listen " listen " backlog=4096;"; next }
		/^        listen 127.0.0.1:8090;$/ { print "        listen " status ";"; next }
		{ print }
	' "$FG_ROOT/deploy/nginx.conf" >"$dir/nginx.conf.tmp"
	mv "$dir/nginx.conf.tmp" "$dir/nginx.conf"
	# -p: the prefix for anything the config leaves relative; -e (1.19.5+):
	# the error log before the config is read, else /var/log/nginx. Checked
	# when nginx is installed (deploy's tests render it without).
	[[ ! -x $FG_NGINX ]] || "$FG_NGINX" -t -q -p "$dir/" -e "$dir/logs/error.log" -c "$dir/nginx.conf"
}

start() {
	local dir
	dir=$(cd "$1" && pwd)
	if fg_pid "$dir/nginx.pid" nginx >/dev/null; then
		fg_log "nginx: already running (pid $(cat "$dir/nginx.pid"))"
		return 0
	fi
	"$FG_NGINX" -p "$dir/" -e "$dir/logs/error.log" -c "$dir/nginx.conf"
	local deadline=$((SECONDS + 10))
	until fg_pid "$dir/nginx.pid" nginx >/dev/null; do
		if ((SECONDS >= deadline)); then
			fg_err "nginx did not start"
			fg_tail "$dir/logs/error.log"
			exit 1
		fi
		sleep 0.1
	done
	fg_log "nginx: pid $(cat "$dir/nginx.pid"), config $dir/nginx.conf, logs $dir/logs"
}

stop() {
	local dir=$1 pid
	pid=$(fg_pid "$dir/nginx.pid" nginx) || return 0
	kill -QUIT "$pid"
	if ! fg_wait_gone "$pid" 10; then
		kill -TERM "$pid"
		fg_wait_gone "$pid" 5
	fi
}

case ${1:-} in
install) install_nginx ;;
conf)
	shift
	(($# >= 3)) || {
		fg_err "usage: nginx.sh conf DIR LISTEN GATEWAY..."
		exit 2
	}
	conf "$@"
	;;
start) start "$2" ;;
stop) stop "$2" ;;
*)
	fg_err "usage: nginx.sh install | conf DIR LISTEN GATEWAY... | start DIR | stop DIR"
	exit 2
	;;
esac
