#!/usr/bin/env bash
# deploy/local/chromium.sh: Chromium (Debian's `chromium` package) for the
# tests that drive a real browser (internal/browser, and through it the
# sale page and CORS tests). Run by `make tools`, which `make test` depends
# on; the tests start their own headless chromium on loopback and fail,
# naming `make tools`, when it is missing.
#
#   chromium.sh install   install the chromium package when FG_CHROMIUM
#                         (/usr/bin/chromium) is missing; idempotent: when
#                         it is there it only returns
#
# Nothing is started here and nothing runs as a service.
set -Eeuo pipefail

# shellcheck source=deploy/local/lib.sh
. "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/lib.sh"
trap 'fg_err "$0: failed at line $LINENO: $BASH_COMMAND"' ERR

FG_CHROMIUM=${FG_CHROMIUM:-/usr/bin/chromium}

install_chromium() {
	[[ -x $FG_CHROMIUM ]] && return 0
	fg_log "installing chromium"
	# --no-install-recommends: not chromium-sandbox (the tests run as root
	# with --no-sandbox), nor the desktop's fonts, notification daemon and
	# udev. The package depends on fontconfig but on no font: fonts-dejavu-
	# core gives a machine with none the text a screenshot shows.
	fg_apt_install --no-install-recommends chromium fonts-dejavu-core
	[[ -x $FG_CHROMIUM ]] || {
		fg_err "chromium installed, but $FG_CHROMIUM is not there"
		exit 1
	}
	fg_log "chromium: $("$FG_CHROMIUM" --version 2>/dev/null || echo "$FG_CHROMIUM")"
}

case ${1:-} in
install) install_chromium ;;
*)
	fg_err "usage: chromium.sh install"
	exit 2
	;;
esac
