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
#   scripts/vmtest/callflow-build.sh BIN N
set -euo pipefail
BIN=${1:?callflow-build.sh BIN N}
N=${2:?callflow-build.sh BIN N}
command -v valgrind >/dev/null || { echo "vmtest: callflow needs valgrind for the reference counts (apt-get install valgrind; scripts/deps/callflow.txt)" >&2; exit 1; }
make -s hookit >/dev/null
FLAGS="-O1 -g -fno-inline -fno-optimize-sibling-calls -Wall -Werror -pthread -static"
gcc $FLAGS -finstrument-functions -o "$BIN/callflow_exact" examples/callflow_exact.c bin/libhookit.a
gcc $FLAGS -o "$BIN/callflow_exact.ref" examples/callflow_exact.c
valgrind --tool=callgrind --callgrind-out-file="$BIN/callflow_exact.callgrind" "$BIN/callflow_exact.ref" "$N" >"$BIN/callflow_exact.ref.log" 2>&1 ||
	{ cat "$BIN/callflow_exact.ref.log"; exit 1; }
# The exact reference and the environmental overhead: the ITrace of the
# same instrumented binary with its hooks not recording (HOOKIT_DIR unset),
# on this host (no-module path: ptrace single-step, so N stays small).
go build -o bin/ ./tools/swtrace ./tools/post ./daemon/cmd/pitraced
it=$(mktemp -d)
env -u HOOKIT_DIR scripts/run.itrace -o "$it" -- "$BIN/callflow_exact" "$N" >"$it/run.log" 2>&1 || { cat "$it/run.log"; rm -rf "$it"; exit 1; }
cp "$it/arc" "$BIN/callflow_exact.arc"
rm -rf "$it"
rm -f "$BIN/callflow_exact.ref" "$BIN/callflow_exact.ref.log"
echo "$N" >"$BIN/callflow_exact.n"
CGO_ENABLED=0 go build -ldflags='-s -w' -o "$BIN/hookit" ./tools/hookit
echo "vmtest: callflow: example, callgrind reference ($N leaf calls a pass) and hookit built"
