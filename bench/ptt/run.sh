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
