#!/bin/bash
# tprof overhead, side by side: the bundled example's run time
#   (1) with nothing tracing,
#   (2) under swtrace tprof at RATE Hz (daemon or module backend, whichever is active),
#   (3) under `perf record -e cpu-clock -F RATE`,
#   (4) and (5): the same two with call stacks (swtrace enable callstack; perf record -g),
#   (6) and (7): call stacks unwound by call-frame information (swtrace enable
#       callstack --unwind dwarf; perf record --call-graph dwarf), both copying
#       8192 bytes of user stack per sample; perf unwinds at perf report, the
#       daemon as it drains (its unwinding time is printed below the table).
# Each configuration runs RUNS times; the median wall time is reported.
# Then: continuous mode, records per second drained to the file, and records lost.
#
#   bench/tprof-overhead.sh [RATE=1000] [RUNS=5] [UNITS=200]
set -euo pipefail
cd "$(dirname "$0")/.."
RATE=${1:-1000}
RUNS=${2:-5}
UNITS=${3:-200}
[ "$(id -u)" = 0 ] || { echo "bench: run as root (system-wide tracing)"; exit 1; }
make -s build >/dev/null
SW=bin/swtrace
BURN=bin/cpuburn
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"; $SW free >/dev/null 2>&1 || true' EXIT

now() { date +%s%N; }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

run_plain() { local s; s=$(now); $BURN "$UNITS" >/dev/null; echo $(( $(now) - s )); }
run_swtrace() { swtrace_with tprof; }
run_swtrace_g() { swtrace_with --unwind fp tprof callstack; }
run_swtrace_gd() { swtrace_with --unwind dwarf tprof callstack; }
swtrace_with() {
	$SW free >/dev/null 2>&1 || true
	$SW mode normal >/dev/null
	$SW init -t 64M -m 2M >/dev/null
	$SW enable --only "$@" >/dev/null
	$SW setrate "$RATE" >/dev/null
	$SW on >/dev/null
	local s; s=$(now); $BURN "$UNITS" >/dev/null; local e; e=$(now)
	$SW off >"$tmp/off.out"
	sed -n 's/^swtrace: call stacks: //p' "$tmp/off.out" >"$tmp/unwound"
	$SW get "$tmp/t.nrm2" >/dev/null
	echo $(( e - s ))
}
run_perf() { perf_with; }
run_perf_g() { perf_with -g; }
run_perf_gd() { perf_with --call-graph dwarf,8192; }
perf_with() {
	# Like swtrace on/off, perf starts before and stops after the timed run,
	# so its start-up (synthesizing every process's mappings) is not counted.
	perf record -q -a -e cpu-clock -F "$RATE" "$@" -o "$tmp/perf.data" >/dev/null 2>&1 &
	local pp=$!
	sleep 2
	local s; s=$(now); $BURN "$UNITS" >/dev/null; local e; e=$(now)
	kill -INT $pp; wait $pp 2>/dev/null || true
	echo $(( e - s ))
}

declare -A res
# Interleaved, so that drift in the machine's speed affects all three alike.
for ((i = 0; i < RUNS; i++)); do
	for cfg in plain swtrace perf swtrace_g perf_g swtrace_gd perf_gd; do
		"run_$cfg" >>"$tmp/$cfg.runs"
		[ "$cfg" != swtrace_gd ] || cp "$tmp/unwound" "$tmp/unwound.gd"
	done
done
for cfg in plain swtrace perf swtrace_g perf_g swtrace_gd perf_gd; do
	res[$cfg]=$(median <"$tmp/$cfg.runs")
done
pct() { awk -v a="$1" -v b="${res[plain]}" 'BEGIN {printf "%+.1f%%", (a-b)*100/b}'; }
ms() { awk -v a="$1" 'BEGIN {printf "%.1f", a/1e6}'; }
backend=$($SW info 2>/dev/null | sed -n 's/^backend: \([a-z]*\).*/\1/p')
echo "tprof overhead: cpuburn $UNITS units, median of $RUNS runs, $RATE Hz, system-wide"
printf '  %-34s %10s %10s\n' configuration "wall ms" overhead
printf '  %-34s %10s %10s\n' "no tracing" "$(ms "${res[plain]}")" "-"
printf '  %-34s %10s %10s\n' "swtrace tprof ($backend backend)" "$(ms "${res[swtrace]}")" "$(pct "${res[swtrace]}")"
printf '  %-34s %10s %10s\n' "perf record -e cpu-clock -a" "$(ms "${res[perf]}")" "$(pct "${res[perf]}")"
printf '  %-34s %10s %10s\n' "swtrace tprof + callstack" "$(ms "${res[swtrace_g]}")" "$(pct "${res[swtrace_g]}")"
printf '  %-34s %10s %10s\n' "perf record -e cpu-clock -a -g" "$(ms "${res[perf_g]}")" "$(pct "${res[perf_g]}")"
printf '  %-34s %10s %10s\n' "swtrace ... callstack --unwind dwarf" "$(ms "${res[swtrace_gd]}")" "$(pct "${res[swtrace_gd]}")"
printf '  %-34s %10s %10s\n' "perf record -a --call-graph dwarf" "$(ms "${res[perf_gd]}")" "$(pct "${res[perf_gd]}")"
echo "  (--unwind dwarf, last run: $(cat "$tmp/unwound.gd"))"

# Continuous mode: drain throughput with zero loss, at the highest tick rate the kernel allows
# plus dispatch records, on small buffers so segments turn over constantly.
maxrate=$(cat /proc/sys/kernel/perf_event_max_sample_rate 2>/dev/null || echo 10000)
crate=$(( maxrate < 20000 ? maxrate : 20000 ))
$SW free >/dev/null 2>&1 || true
$SW mode cont -f "$tmp/cont.nrm2" >/dev/null
$SW init -t 256K -m 256K >/dev/null
$SW enable tprof dispatch >/dev/null
$SW setrate "$crate" >/dev/null
$SW on >/dev/null
s=$(now); $BURN "$UNITS" >/dev/null; e=$(now)
$SW off >/dev/null
$SW info --json >"$tmp/info.json"
$SW mode normal >/dev/null
recs=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(sum(c["records"]+c["mte_records"] for c in d["cpus"]))' "$tmp/info.json")
lost=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(sum(c["lost"]+c["mte_lost"] for c in d["cpus"]))' "$tmp/info.json")
size=$(stat -c %s "$tmp/cont.nrm2")
echo "continuous mode: tprof at $crate Hz + dispatch, 256K buffers per CPU"
awk -v r="$recs" -v l="$lost" -v ns="$((e - s))" -v sz="$size" 'BEGIN {printf "  %d records drained in %.2f s = %.0f records/s, %.1f MB file, %d lost\n", r, ns/1e9, r/(ns/1e9), sz/1e6, l}'
# Drain capacity: records pushed through the facility as fast as two producers can,
# continuous mode to a file, nothing lost (Go benchmark on the same code path).
echo "continuous mode capacity (daemon/facility BenchmarkContDrain, two producer CPUs):"
go test -run '^$' -bench ContDrain -benchtime 4000000x ./daemon/facility/ | awk '/^BenchmarkContDrain/ {for (i = 1; i <= NF; i++) {if ($(i+1) == "records/s") r = $i; if ($(i+1) == "lost") l = $i}; printf "  %.0f records/s drained, %d lost\n", r, l}'
