#!/bin/bash
# PTT read benchmark: Go and C, each printing the PTT mapped read (every
# backend), perf read() on the same counter and clock_gettime
# (CLOCK_THREAD_CPUTIME_ID) side by side in one run. `make bench-ptt`.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-bin}
[ -x "$BIN/ptt_ctest" ] || make --no-print-directory "$BIN/ptt_ctest"
echo "== PTT read benchmark ($(uname -r), $(nproc) CPUs, $(date -u +%FT%TZ))"
go run ./bench/ptt
"$BIN/ptt_ctest" bench
echo "The kmod backend's mapped read is measured inside a VM with the module, in guest"
echo "instructions (-icount), next to perf read() and clock_gettime: the ptt-readcost lines of"
echo '`bash scripts/vmtest/run.sh ptt` (part of make vmtest). `make bench-ptt` runs it (PTT_BENCH_VM=1).'
if [ "${PTT_BENCH_VM:-0}" = 1 ]; then
	bash scripts/vmtest/run.sh ptt | grep -E 'ptt-readcost|vmtest: (PASS|FAIL)'
fi
