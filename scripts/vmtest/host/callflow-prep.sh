#!/bin/bash
# Builds what the call-flow exactness VM run needs (scripts/vmtest/run.sh
# callflow) into BIN: the example built with -finstrument-functions and
# libhookit linked in, static (the guest is a busybox initramfs); the
# reference: callgrind's run, on this host, of the same example built
# without -finstrument-functions, with the same input (a second view);
# the ITrace arc report of the instrumented binary with its hooks not
# recording (the exact reference, and the environmental overhead); and bin/hookit
# (static) to write and check the reports in the guest.
#
#   scripts/vmtest/host/callflow-prep.sh BIN N
set -euo pipefail
BIN=${1:?scripts/vmtest/host/callflow-prep.sh BIN N}
N=${2:?scripts/vmtest/host/callflow-prep.sh BIN N}
command -v valgrind >/dev/null || { echo "vmtest: callflow needs valgrind for the reference counts (apt-get install valgrind; scripts/deps/callflow.txt)" >&2; exit 1; }
make -s hookit >/dev/null
FLAGS="-O2 -g -fno-inline -fno-optimize-sibling-calls -Wall -Werror -pthread -static"
gcc $FLAGS -finstrument-functions -o "$BIN/callflow_exact" examples/callflow_exact.c bin/libhookit.a
gcc $FLAGS -o "$BIN/callflow_exact.ref" examples/callflow_exact.c
valgrind --tool=callgrind --callgrind-out-file="$BIN/callflow_exact.callgrind" "$BIN/callflow_exact.ref" "$N" >"$BIN/callflow_exact.ref.log" 2>&1 ||
	{ cat "$BIN/callflow_exact.ref.log"; exit 1; }
# The exact reference and the environmental overhead: the ITrace of the
# same instrumented binary with its hooks not recording (HOOKIT_DIR unset),
# on this host (no-module path: ptrace single-step, so N stays small).
# The tools make build made (not built again here: make test runs this
# beside the host tests, whose daemons would see their binary replaced),
# with an agent of this run's own on a private socket, stopped after.
[ -x bin/swtrace ] && [ -x bin/post ] && [ -x bin/pitraced ] || make -s build >/dev/null
it=$(mktemp -d)
cp bin/pitraced "$it/pitraced" # the agent's own copy: host tests may rebuild bin/ meanwhile
stop_agent() { PERFINSP_SOCKET="$it/run/pitraced.sock" bin/swtrace daemon stop --force >/dev/null 2>&1 || true; rm -rf "$it"; }
trap stop_agent EXIT
mkdir -m 700 "$it/xdg" # run.itrace's owner file: not the system's /run
env -u HOOKIT_DIR XDG_RUNTIME_DIR="$it/xdg" PERFINSP_SOCKET="$it/run/pitraced.sock" PERFINSP_PITRACED="$it/pitraced" PERFINSP_BACKEND=daemon \
	scripts/run.itrace -o "$it" -- "$BIN/callflow_exact" "$N" >"$it/run.log" 2>&1 || { cat "$it/run.log"; exit 1; }
cp "$it/arc" "$BIN/callflow_exact.arc"
rm -f "$BIN/callflow_exact.ref" "$BIN/callflow_exact.ref.log"
echo "$N" >"$BIN/callflow_exact.n"
CGO_ENABLED=0 go build -ldflags='-s -w' -o "$BIN/hookit" ./tools/hookit
echo "vmtest: callflow: example, callgrind reference ($N leaf calls a pass) and hookit built"
