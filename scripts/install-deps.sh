#!/bin/bash
# Installs what the test suite needs on a fresh Debian machine (root).
# Each area lists its Debian packages in scripts/deps/*.txt, one per line.
set -euo pipefail
cd "$(dirname "$0")/.."
pkgs=()
for f in scripts/deps/*.txt; do
	[ -e "$f" ] || continue
	while read -r p _; do
		[[ -z "$p" || "$p" == \#* ]] && continue
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || pkgs+=("$p")
	done <"$f"
done
if [ ${#pkgs[@]} -eq 0 ]; then
	echo "install-deps: all Debian packages present"
	exit 0
fi
if [ "$(id -u)" != 0 ]; then
	echo "install-deps: need root to install: ${pkgs[*]}" >&2
	[ "${CI:-}" = true ] && exit 1
	exit 0
fi
echo "install-deps: installing ${pkgs[*]}"
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y --no-install-recommends "${pkgs[@]}" >/tmp/perfinsp-apt.log 2>&1; then
	apt-get update >/dev/null 2>&1 || true
	if ! apt-get install -y --no-install-recommends "${pkgs[@]}" >>/tmp/perfinsp-apt.log 2>&1; then
		echo "install-deps: apt-get install failed (see /tmp/perfinsp-apt.log)" >&2
		tail -5 /tmp/perfinsp-apt.log >&2
		[ "${CI:-}" = true ] && exit 1
	fi
fi
