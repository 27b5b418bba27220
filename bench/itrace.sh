#!/bin/bash
# ITrace without the kernel module, side by side with callgrind, on the
# bundled example (examples/itrace.c, N leaf calls):
#   (1) native run time,
#   (2) valgrind --tool=callgrind: run time, slowdown, instructions per second,
#   (3) scripts/run.itrace (pitraced's ptrace tracer) twice: --step single
#       (a stop per instruction) and the default stepping (block-stepping
#       where BTF is honoured, else breakpoint stepping: a stop per branch):
#       instructions traced per second, slowdown, the rate against
#       single-stepping, stops per instruction, records per second and
#       bytes per traced instruction (from post -itrace),
#   (4) a run.itrace --step verify: the block decoder's cost per block, and
#       the stops block-stepping would take where BTF is honoured.
# Each timing is the median of RUNS runs (the traced runs: one each).
#
#   bench/itrace.sh [N=5000] [RUNS=3]
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
-h | --help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
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

# traced MODE: one run.itrace; sets st_* (instructions, seconds traced,
# stops, records/s, bytes/insn, the stepping line).
traced() {
	local mode=$1 out
	out=$(scripts/run.itrace --step "$mode" -o "$tmp" -- $EX "$N" 2>&1 >/dev/null)
	st_step=$(sed -n 's/^run.itrace: stepping: //p' <<<"$out")
	st_insts=$(sed -n '1p' "$tmp/itrace.out" | awk '{print $4}')
	local stats
	stats=$(grep -m1 'bytes per instruction' "$tmp/itrace.out")
	st_secs=$(echo "$stats" | sed -n 's/.*traced for \([0-9.]*\) s.*/\1/p')
	st_bpi=$(echo "$stats" | sed -n 's/.*: \([0-9.]*\) bytes per instruction.*/\1/p')
	st_rps=$(echo "$stats" | sed -n 's/.*, \([0-9]*\) records\/s.*/\1/p')
	st_stops=$(awk -v s="$st_step" 'BEGIN {
		n = 0
		if (match(s, /[0-9]+ single steps/)) n += substr(s, RSTART, RLENGTH) + 0
		if (match(s, /[0-9]+ block steps/)) n += substr(s, RSTART, RLENGTH) + 0
		if (match(s, /[0-9]+ breakpoint stops/)) n += substr(s, RSTART, RLENGTH) + 0
		print n }')
}
traced single
s_insts=$st_insts s_secs=$st_secs s_stops=$st_stops s_rps=$st_rps s_bpi=$st_bpi s_step=$st_step
traced auto
auto=$st_step
load=$(cut -d' ' -f1-3 /proc/loadavg)

awk -v n="$N" -v nat="$native" -v cg="$cg" -v ir="$ir" -v load="$load" \
	-v si="$s_insts" -v ss="$s_secs" -v sst="$s_stops" -v srps="$s_rps" -v sbpi="$s_bpi" \
	-v ai="$st_insts" -v as="$st_secs" -v ast="$st_stops" -v arps="$st_rps" -v abpi="$st_bpi" 'BEGIN {
	printf "ITrace benchmark: examples/itrace.c, %d leaf calls (medians; each traced run once; load average %s)\n", n, load
	printf "%-36s %12s %14s %10s %12s %14s\n", "", "wall time", "instructions/s", "slowdown", "vs single", "stops/instr"
	printf "%-36s %10.3f s %14s %10s %12s %14s\n", "native", nat/1e9, "-", "1x", "", ""
	printf "%-36s %10.3f s %14.0f %9.0fx %12s %14s\n", "valgrind --tool=callgrind", cg/1e9, ir/(cg/1e9), cg/nat, sprintf("%.0fx", (ir/(cg/1e9))/(si/ss)), ""
	printf "%-36s %10.3f s %14.0f %9.0fx %12s %14.3f\n", "run.itrace --step single", ss, si/ss, ss*1e9/nat, "1x", sst/si
	printf "%-36s %10.3f s %14.0f %9.0fx %12s %14.3f\n", "run.itrace (default: --step auto)", as, ai/as, as*1e9/nat, sprintf("%.2fx", (ai/as)/(si/ss)), ast/ai
	printf "itrace: %d instructions traced (callgrind: %d Ir, its preloads included); single: %d records/s, %.2f bytes per instruction; auto: %d records/s, %.2f bytes per instruction\n", ai, ir, srps, sbpi, arps, abpi
	if (si != ai) printf "itrace: the two traced runs counted different instructions (%d single, %d auto)\n", si, ai
}'
echo "stepping (single): $s_step"
echo "stepping (auto): $auto"
verify=$(scripts/run.itrace --step verify -o "$tmp" -- $EX "$N" 2>&1 >/dev/null | sed -n 's/^run.itrace: stepping: //p')
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
