#!/bin/bash
# Call-flow overhead, side by side with uftrace, on the same
# -finstrument-functions binary (bin/callflow N: about 2.1 N calls of tiny
# functions, N = 5,000,000 gives about 10.5 M):
#   (1) plain run (the hooks are glibc's empty ones),
#   (2) under libhookit (HOOKIT_METRIC=task-clock, the default, and rdtsc),
#   (3) under `uftrace record`.
# Prints ns per call over the plain run (the recording run only; the
# reports are timed apart) and bytes written per call. Each timing is the
# median of RUNS runs.
#
#   bench/callflow.sh [N=5000000] [RUNS=3]
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-5000000}
RUNS=${2:-3}
command -v uftrace >/dev/null || { echo "bench: uftrace is not installed (apt-get install uftrace; scripts/deps/callflow.txt)"; exit 1; }
make -s hookit >/dev/null
go build -o bin/ ./tools/hookit
EX=bin/callflow
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

now() { date +%s%N; }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

plain=$(for _ in $(seq "$RUNS"); do s=$(now); $EX "$N" >/dev/null; echo $(( $(now) - s )); done | median)
declare -A hk hkbytes
for m in task-clock rdtsc; do
	hk[$m]=$(for _ in $(seq "$RUNS"); do rm -rf "$tmp/hk"; s=$(now); HOOKIT_DIR=$tmp/hk HOOKIT_METRIC=$m LD_PRELOAD=$PWD/bin/libhookit.so $EX "$N" >/dev/null; echo $(( $(now) - s )); done | median)
	hkbytes[$m]=$(du -sb --apparent-size "$tmp/hk" | cut -f1)
done
s=$(now); bin/hookit report -i "$tmp/hk" >/dev/null; rep=$(( $(now) - s ))
calls=$(awk '$1 ~ /^[0-9]+$/ && NF >= 6 {c += $1} END {print c}' "$tmp/hk/log-gen")
uf=$(for _ in $(seq "$RUNS"); do rm -rf "$tmp/uf"; s=$(now); uftrace record -d "$tmp/uf" $EX "$N" >/dev/null 2>&1; echo $(( $(now) - s )); done | median)
ufbytes=$(du -sb --apparent-size "$tmp/uf" | cut -f1)

percall() { awk -v t="$1" -v p="$plain" -v c="$calls" 'BEGIN {printf "%.1f", (t - p) / c}'; }
perb() { awk -v b="$1" -v c="$calls" 'BEGIN {printf "%.1f", b / c}'; }
echo "callflow overhead: bin/callflow $N ($calls calls), median of $RUNS runs, $(nproc) CPUs, load $(cut -d' ' -f1 /proc/loadavg)"
printf "%-28s %12s %12s %14s\n" "" "run ms" "ns/call" "bytes/call"
printf "%-28s %12.1f %12s %14s\n" "plain" "$(awk -v t=$plain 'BEGIN{print t/1e6}')" "-" "-"
for m in task-clock rdtsc; do
	printf "%-28s %12.1f %12s %14s\n" "run.hookit -m $m" "$(awk -v t=${hk[$m]} 'BEGIN{print t/1e6}')" "$(percall ${hk[$m]})" "$(perb ${hkbytes[$m]})"
done
printf "%-28s %12.1f %12s %14s\n" "uftrace record" "$(awk -v t=$uf 'BEGIN{print t/1e6}')" "$(percall $uf)" "$(perb $ufbytes)"
awk -v a="${hk[task-clock]}" -v b="$uf" -v p="$plain" 'BEGIN {printf "hookit (task-clock) / uftrace per-call cost: %.2f (target <= 0.33)\n", (a - p) / (b - p)}'
echo "hookit report (log-rt, log-gen, pprof, folded, Chrome trace): $(( rep / 1000000 )) ms"
