#!/bin/bash
# Cost of one trace record written through the pitrace module (the tprof
# sample path and the TraceHook ioctl path) side by side with the kernel's
# perf ring buffer (a sample of the syscalls:sys_enter_getppid tracepoint),
# measured in the same QEMU guest under -icount shift=0,sleep=off, where the
# guest TSC advances by one per instruction: the figures are guest
# instructions per record. Target: pitrace <= 0.5 x perf.
#
#   bench/kmod/record-cost.sh        (also: make vmtest-bench)
set -euo pipefail
cd "$(dirname "$0")/../.."
# (build/vm first: tee opens its file as the pipeline starts, before
# run.sh would make the directory)
mkdir -p build/vm
bash scripts/vmtest/run.sh bench | tee build/vm/bench.out
# run.sh skips, saying why, when a dependency is missing (it fails instead under CI=true)
grep -q '^vmtest: SKIP: ' build/vm/bench.out && exit 0
grep -q '^  bench: ' build/vm/bench.out || { echo "record-cost: no figures (see build/vm/serial-bench.log)" >&2; exit 1; }
