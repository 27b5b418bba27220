#!/bin/bash
# ITrace without the kernel module, side by side with callgrind, on the
# bundled example (examples/itrace.c, N leaf calls):
#   (1) native run time,
#   (2) valgrind --tool=callgrind: run time, slowdown, instructions per second,
#   (3) scripts/run.itrace (pitraced's ptrace single-step tracer): instructions
#       traced per second, slowdown, records per second through the facility
#       and bytes per traced instruction (from post -itrace),
#   (4) block-stepping (docs/itrace.md): how the traced run stepped (BTF
#       honoured or ignored here), and a run.itrace --step verify: the block
#       decoder's cost per block, and the stops block-stepping would take
#       where BTF is honoured against single-stepping's one per instruction.
# Each timing is the median of RUNS runs (the traced runs: one each).
#
#   bench/itrace.sh [N=5000] [RUNS=3]
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
-h | --help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac
N=${1:-5000}
RUNS=${2:-3}
case "$N$RUNS" in
*[!0-9]*) echo "bench: N and RUNS are numbers (bench/itrace.sh --help)" >&2; exit 2 ;;
esac
[ "$(id -u)" = 0 ] || { echo "bench: run as root (the daemon backend)"; exit 1; }
command -v valgrind >/dev/null || { echo "bench: valgrind is not installed (make deps)"; exit 1; }
make -s build bin/itrace >/dev/null
EX=bin/itrace
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"; bin/swtrace free >/dev/null 2>&1 || true' EXIT

now() { date +%s%N; }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

native=$(for _ in $(seq "$RUNS"); do s=$(now); $EX "$N" >/dev/null; echo $(( $(now) - s )); done | median)
cg=$(for _ in $(seq "$RUNS"); do s=$(now); valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.out" $EX "$N" >/dev/null 2>&1; echo $(( $(now) - s )); done | median)
ir=$(awk '/^(summary|totals):/ {print $2; exit}' "$tmp/cg.out")

auto=$(scripts/run.itrace -o "$tmp" -- $EX "$N" | sed -n 's/^run.itrace: stepping: //p')
line=$(sed -n '1p' "$tmp/itrace.out")
stats=$(grep -m1 'bytes per instruction' "$tmp/itrace.out")
insts=$(echo "$line" | awk '{print $4}')
secs=$(echo "$stats" | sed -n 's/.*traced for \([0-9.]*\) s.*/\1/p')
bpi=$(echo "$stats" | sed -n 's/.*: \([0-9.]*\) bytes per instruction.*/\1/p')
rps=$(echo "$stats" | sed -n 's/.*, \([0-9]*\) records\/s.*/\1/p')

awk -v n="$N" -v nat="$native" -v cg="$cg" -v ir="$ir" -v insts="$insts" -v secs="$secs" -v bpi="$bpi" -v rps="$rps" 'BEGIN {
	printf "ITrace benchmark: examples/itrace.c, %d leaf calls (medians; the traced run once)\n", n
	printf "%-34s %12s %14s %12s\n", "", "wall time", "instructions/s", "slowdown"
	printf "%-34s %10.3f s %14s %12s\n", "native", nat/1e9, "-", "1x"
	printf "%-34s %10.3f s %14.0f %11.0fx\n", "valgrind --tool=callgrind", cg/1e9, ir/(cg/1e9), cg/nat
	printf "%-34s %10.3f s %14.0f %11.0fx\n", "run.itrace (ptrace, --step auto)", secs, insts/secs, secs*1e9/nat
	printf "itrace: %d instructions traced (callgrind: %d Ir, its preloads included), %d records/s through the facility, %.2f bytes per traced instruction\n", insts, ir, rps, bpi
}'
echo "stepping (auto): $auto"
verify=$(scripts/run.itrace --step verify -o "$tmp" -- $EX "$N" | sed -n 's/^run.itrace: stepping: //p')
vinsts=$(sed -n '1p' "$tmp/itrace.out" | awk '{print $4}')
branches=$(sed -n '1p' "$tmp/itrace.out" | sed -n 's/.*, \([0-9]*\) taken branches.*/\1/p')
echo "$verify" | awk -v insts="$vinsts" -v br="$branches" '{
	if (!match($0, /[0-9]+ blocks checked, [0-9]+ disagreements, [0-9]+ ns per block/)) { print "block-stepping: no verify figures in: " $0; exit }
	split(substr($0, RSTART, RLENGTH), v, " ")
	match($0, /would stop [0-9]+ times \([0-9]+ block \+ [0-9]+ single steps\)/)
	split(substr($0, RSTART, RLENGTH), w, "[ (]+")
	printf "block decoder (--step verify): %d blocks checked, %d disagreements, %d ns per block decoded (stack reads included)\n", v[1], v[4], v[6]
	printf "stops: single-step %d (1 per instruction); block-step %d (%d block + %d single steps: %.3f per instruction, %.1fx fewer); taken branches %d (%.3f per instruction: the floor)\n",
		insts, w[3], w[5], w[8], w[3]/insts, insts/w[3], br, br/insts
}'
go test -run '^$' -bench '^BenchmarkBlockEnd$' -count 2 ./internal/x86branch/ |
	awk '/^BenchmarkBlockEnd/ {printf "%s%s", sep, $3; sep = ", "} END {print " ns per cached block (BenchmarkBlockEnd, two runs): what a block step adds to its stop"}'
