#!/bin/bash
# Host side of `run.sh itrace`: the bundled ITrace example built static (the
# guest has no C library) exactly as mk/itrace.mk builds it, and the counts
# valgrind --tool=callgrind gives for the same binary and arguments here,
# which the guest compares the module's trace with (pitest itrace-cmp).
# Callgrind cannot run in the guest (no valgrind there); the program's own
# functions do not depend on the CPU, so the host's counts are the guest's.
#   scripts/vmtest/host/itrace-prep.sh BIN_DIR WORK_DIR N
set -euo pipefail
bin=$1 work=$2 n=$3
gcc -O1 -g -fno-inline -fno-optimize-sibling-calls -Wall -Werror -pthread -static \
	-o "$bin/itrace" examples/itrace.c -lm
gcc -O1 -g -fno-inline -fno-optimize-sibling-calls -Wall -Werror -pthread -static \
	-Ilibperfutil/c/include -o "$bin/itrace_onoff" scripts/vmtest/progs/itrace_onoff.c libperfutil/c/*.c -lm
gcc -O1 -g -fno-inline -fno-optimize-sibling-calls -Wall -Werror -static \
	-o "$bin/itrace_edge" scripts/vmtest/progs/itrace_edge.c
# ITrace's step modes (ITRACE_ON flags, ITRACE_STATS' block fields)
gcc -O1 -Wall -Werror -static -Ikmod/uapi -o "$bin/itrace_block" scripts/vmtest/progs/itrace_block.c
if ! command -v valgrind >/dev/null; then
	if [ "${CI:-}" = true ]; then
		echo "vmtest: FAIL: valgrind missing (apt-get install valgrind)" >&2
		exit 1
	fi
	echo "vmtest: SKIP: no valgrind on the host: the guest cannot compare with callgrind (apt-get install valgrind)"
	exit 3
fi
valgrind --tool=callgrind --callgrind-out-file="$bin/itrace.cg" "$bin/itrace" "$n" >"$work/itrace-callgrind.log" 2>&1 ||
	{ cat "$work/itrace-callgrind.log" >&2; exit 1; }
echo "vmtest: callgrind of the static example ($n leaf calls): $(grep -m1 '^summary:\|^totals:' "$bin/itrace.cg")"
# ITraceOn/Off around one call: callgrind of the same program (ITraceOn
# fails here: no module, no daemon) gives traced_call's own count.
PERFINSP_BACKEND=daemon PERFINSP_SOCKET=/nonexistent/sock \
	valgrind --tool=callgrind --callgrind-out-file="$bin/itrace_onoff.cg" "$bin/itrace_onoff" >"$work/itrace-onoff-callgrind.log" 2>&1 ||
	{ cat "$work/itrace-onoff-callgrind.log" >&2; exit 1; }
# Signal handlers left by siglongjmp (scripts/vmtest/progs/itrace_edge.c)
valgrind --tool=callgrind --callgrind-out-file="$bin/itrace_edge.cg" "$bin/itrace_edge" 200 >"$work/itrace-sigjmp-callgrind.log" 2>&1 ||
	{ cat "$work/itrace-sigjmp-callgrind.log" >&2; exit 1; }
# A read restarted after SIGSTOP/SIGCONT: callgrind counts its syscall
# instruction once whether or not the read was stopped (checked by hand:
# read_raw 8 either way), so this unstopped run is the expected count.
rm -f "$work/itrace-edge.fifo"
mkfifo "$work/itrace-edge.fifo"
valgrind --tool=callgrind --callgrind-out-file="$bin/itrace_edge_restart.cg" "$bin/itrace_edge" restart "$work/itrace-edge.fifo" \
	>"$work/itrace-restart-callgrind.log" 2>&1 &
vg=$!
echo xy >"$work/itrace-edge.fifo"
wait "$vg" || { cat "$work/itrace-restart-callgrind.log" >&2; exit 1; }
# A read restarted after an SA_RESTART handler (itrace_edge restart-handler):
# callgrind's run gets the same SIGUSR2 while it blocks in its read of fd 3
# (daemon/itrace TestRestartAfterHandlerMatchesCallgrind: the ptrace path's
# counts equal these).
valgrind --tool=callgrind --callgrind-out-file="$bin/itrace_edge_rh.cg" "$bin/itrace_edge" restart-handler \
	>"$work/itrace-rh-callgrind.log" 2>&1 &
vg=$!
for _ in $(seq 600); do
	grep -q '^0 0x3 ' "/proc/$vg/syscall" 2>/dev/null && grep -q '^State:.*S (sleeping)' "/proc/$vg/status" && break
	sleep 0.1
done
kill -USR2 "$vg"
wait "$vg" || { cat "$work/itrace-rh-callgrind.log" >&2; exit 1; }
