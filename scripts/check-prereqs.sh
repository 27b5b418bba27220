#!/bin/bash
# check-prereqs.sh: what `make` needs before it builds anything — Go at the
# version go.mod names, and a C compiler — each missing one named with the
# exact command that provides it. Exits 1 at the first one missing.
# --go: Go only (make deps installs the C toolchain itself).
set -uo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
want=$(sed -n 's/^go \([0-9][0-9.]*\).*/\1/p' go.mod)
case $(uname -m) in
x86_64) arch=amd64 ;;
aarch64) arch=arm64 ;;
*) arch=$(uname -m) ;;
esac
get_go="curl -fsSL https://go.dev/dl/go${want}.linux-${arch}.tar.gz | sudo tar -C /usr/local -xz && export PATH=/usr/local/go/bin:\$PATH"
if ! command -v "$GO" >/dev/null 2>&1; then
	echo "perfinsp needs Go $want or later (go.mod) and finds no '$GO' in PATH. Install it:" >&2
	echo "  $get_go" >&2
	exit 1
fi
# GOVERSION is the toolchain that builds this module (GOTOOLCHAIN=auto
# may have fetched a newer one for go.mod).
have=$("$GO" env GOVERSION 2>/dev/null | sed 's/^go//')
older() { # older A B: version A < version B
	[ "$1" != "$2" ] && [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -1)" = "$1" ]
}
if [ -z "$have" ] || older "$have" "$want"; then
	echo "perfinsp needs Go $want or later (go.mod); '$GO' is ${have:-too old to say}. Install it:" >&2
	echo "  $get_go" >&2
	exit 1
fi
[ "${1:-}" = --go ] && exit 0
for cc in gcc make; do
	if ! command -v "$cc" >/dev/null 2>&1; then
		echo "perfinsp needs a C toolchain ($cc is missing). Install it:" >&2
		echo "  sudo apt-get install -y gcc make libc6-dev" >&2
		exit 1
	fi
done
