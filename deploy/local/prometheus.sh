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
# --no-install-recommends: not the node exporter, nor the web assets.
fg_apt_install --no-install-recommends prometheus
command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1 || {
	fg_err "prometheus installed, but promtool or prometheus is not on PATH"
	exit 1
}
