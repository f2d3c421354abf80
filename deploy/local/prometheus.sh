#!/usr/bin/env bash
# deploy/local/prometheus.sh: installs Prometheus (Debian's `prometheus`
# package: the prometheus server and promtool) when promtool or prometheus is
# missing, for the tests of the alert rules and of the dashboard
# (deploy/prometheus_test.go, cmd/flashgate/dashboard_test.go). Run by
# `make tools`, which `make test` depends on. Nothing is started: the package's
# service (and prometheus-node-exporter's, which it recommends) is denied
# for the time of the install, as in up.sh; the tests run their own
# prometheus on 127.0.0.1. Idempotent: when both are there it only returns.
set -Eeuo pipefail

# shellcheck source=deploy/local/lib.sh
. "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/lib.sh"
trap 'fg_err "$0: failed at line $LINENO: $BASH_COMMAND"' ERR

if command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1; then
	exit 0
fi

fg_log "installing prometheus (promtool)"
sudo=()
if ((EUID != 0)); then
	command -v sudo >/dev/null 2>&1 || {
		fg_err "need root (or sudo) to install prometheus"
		exit 1
	}
	sudo=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
policy=/usr/sbin/policy-rc.d
if [[ ! -e $policy ]]; then
	printf '#!/bin/sh\n# flashgate deploy/local/prometheus.sh: during apt-get install only\nexit 101\n' |
		"${sudo[@]}" tee "$policy" >/dev/null
	"${sudo[@]}" chmod 755 "$policy"
	trap '"${sudo[@]}" rm -f "$policy"' EXIT
fi
if ! compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null; then
	"${sudo[@]}" apt-get update
fi
# --no-install-recommends: not the node exporter, nor the web assets. The
# lock timeout: up.sh may be installing at the same time (make -j).
install=(apt-get install -y --no-install-recommends -o DPkg::Lock::Timeout=300 prometheus)
if ! "${sudo[@]}" "${install[@]}"; then
	"${sudo[@]}" apt-get update
	"${sudo[@]}" "${install[@]}"
fi
command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1 || {
	fg_err "prometheus installed, but promtool or prometheus is not on PATH"
	exit 1
}
