#!/usr/bin/env bash
# deploy/local/graphviz.sh: installs Graphviz (Debian's `graphviz` package,
# for its `dot`) when dot is missing, so that `make bench` can draw the
# cost part's CPU profiles with `go tool pprof -svg` into docs/. Run by
# `make bench`; nothing else needs it, and without it the report says
# that no picture was drawn. Idempotent: when dot is there it only returns.
set -Eeuo pipefail

# shellcheck source=deploy/local/lib.sh
. "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/lib.sh"
trap 'fg_err "$0: failed at line $LINENO: $BASH_COMMAND"' ERR

command -v dot >/dev/null 2>&1 && exit 0

fg_log "installing graphviz (dot)"
fg_apt_install --no-install-recommends graphviz
command -v dot >/dev/null 2>&1 || {
	fg_err "graphviz installed, but dot is not on PATH"
	exit 1
}
