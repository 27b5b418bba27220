#!/bin/bash
# Call-flow overhead, side by side with uftrace, on the same
# -finstrument-functions binary (bin/callflow N: about 2.1 N calls of tiny
# functions, N = 5,000,000 gives about 10.5 M):
#   (1) plain run (the hooks are glibc's empty ones),
#   (2) under libhookit (HOOKIT_METRIC=task-clock, the default, and rdtsc),
#   (3) under `uftrace record`;
# then the reports of the same calls side by side (`hookit report` on the
# task-clock run, with and without the Chrome trace, against `uftrace
# report`: CPU, wall, peak RSS) and the whole run with its reports
# (`scripts/run.hookit` against `uftrace record && uftrace report`).
# Prints, per call over the plain run, the CPU time (of the run and its
# children, perf stat's task-clock where perf runs, else user + system:
# what the recording costs the machine, and the figure that stays put on
# a loaded host) and the wall time, and the bytes
# written per call. Each figure is the median of RUNS runs; the spread
# (min..max of the CPU ns/call) is printed beside it.
#
#   bench/callflow.sh [N=5000000] [RUNS=3]
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-5000000}
RUNS=${2:-3}
command -v uftrace >/dev/null || { echo "bench: uftrace is not installed (apt-get install uftrace; scripts/deps/callflow.txt)"; exit 1; }
[ -x /usr/bin/time ] || { echo "bench: /usr/bin/time is not installed (apt-get install time; scripts/deps/callflow.txt)"; exit 1; }
make -s hookit >/dev/null
go build -o bin/ ./tools/hookit
EX=$PWD/bin/callflow
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The CPU time of a run: perf stat's task-clock of the run and its
# children (nanoseconds) where perf runs, else /usr/bin/time's user +
# system (10 ms steps: 2.4 ns a call at N = 2,000,000).
if perf stat -x, -e task-clock -o /dev/null true >/dev/null 2>&1; then
	cpu_src="perf stat task-clock"
else
	cpu_src="/usr/bin/time user + system, 10 ms steps"
fi

# run NAME DIR cmd...: RUNS runs; each appends "wall_ns cpu_ns rss_kb" to
# $tmp/NAME (DIR is removed first, unless it is -).
run() {
	local name=$1 dir=$2 cpu
	shift 2
	for _ in $(seq "$RUNS"); do
		[ "$dir" = - ] || rm -rf "$dir"
		if [ "$cpu_src" = "perf stat task-clock" ]; then
			perf stat -x, -e task-clock -o "$tmp/ps" -- /usr/bin/time -o "$tmp/t" -f "%e %U %S %M" "$@" >/dev/null 2>&1 ||
				{ echo "bench: $* failed" >&2; exit 1; }
			cpu=$(awk -F, '$3 == "task-clock" {printf "%.0f", $1 * 1e6}' "$tmp/ps")
		else
			/usr/bin/time -o "$tmp/t" -f "%e %U %S %M" "$@" >/dev/null 2>&1 || { echo "bench: $* failed" >&2; exit 1; }
			cpu=
		fi
		awk -v cpu="$cpu" '{printf "%.0f %.0f %d\n", $1 * 1e9, cpu != "" ? cpu : ($2 + $3) * 1e9, $4}' "$tmp/t" >>"$tmp/$name"
	done
}
med() { cut -d' ' -f"$2" "$tmp/$1" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
lo() { cut -d' ' -f"$2" "$tmp/$1" | sort -n | head -1; }
hi() { cut -d' ' -f"$2" "$tmp/$1" | sort -n | tail -1; }

run plain "$tmp/none" "$EX" "$N"
declare -A bytes
for m in rdtsc task-clock; do # the default metric last: its files stay for the reports
	run "hk-$m" "$tmp/hk" env HOOKIT_DIR="$tmp/hk" HOOKIT_METRIC=$m LD_PRELOAD="$PWD/bin/libhookit.so" "$EX" "$N"
	bytes[$m]=$(du -sb --apparent-size "$tmp/hk" | cut -f1)
done
run rep-hk - bin/hookit report -i "$tmp/hk" -o "$tmp/hk"
calls=$(awk '$1 ~ /^[0-9]+$/ && NF >= 6 {c += $1} END {print c}' "$tmp/hk/log-gen")
# What remains after the calibration: the calibrated total (task-clock ns)
# against the plain run's CPU time (perf stat's task-clock where perf runs,
# finer than /usr/bin/time's 10 ms), and the sum of log-gen's error bars.
base=$(awk '$1 == "total" && $2 == "BASE" {print $3}' "$tmp/hk/log-gen")
errsum=$(awk '$1 ~ /^[0-9]+$/ && NF >= 7 {e += $3} END {printf "%.0f", e}' "$tmp/hk/log-gen")
if plain_ns=$(perf stat -x, -e task-clock -r "$RUNS" "$EX" "$N" 2>&1 >/dev/null | awk -F, '$3 == "task-clock" && $1 > 0 {printf "%.0f", $1 * 1e6; f = 1} END {exit !f}'); then
	plain_src="perf stat task-clock, mean of $RUNS"
else
	plain_ns=$(med plain 2)
	plain_src="/usr/bin/time, 10 ms resolution"
fi
run rep-hk-chrome - bin/hookit report --chrome -i "$tmp/hk" -o "$tmp/hk"
chrome_bytes=$(stat -c %s "$tmp/hk/callflow.trace.json")
run uftrace "$tmp/uf" uftrace record -d "$tmp/uf" "$EX" "$N"
bytes[uftrace]=$(du -sb --apparent-size "$tmp/uf" | cut -f1)
run rep-uf - uftrace report -d "$tmp/uf"
run whole-hk "$tmp/whk" scripts/run.hookit -o "$tmp/whk" -- "$EX" "$N"
run whole-uf "$tmp/wuf" sh -c 'uftrace record -d "$1" "$2" "$3" && uftrace report -d "$1"' sh "$tmp/wuf" "$EX" "$N"

pc() { awk -v t="$1" -v p="$2" -v c="$calls" 'BEGIN {printf "%.1f", (t - p) / c}'; }
echo "callflow overhead: bin/callflow $N ($calls calls), median of $RUNS runs, $(nproc) CPUs, load $(cut -d' ' -f1 /proc/loadavg); CPU: $cpu_src"
printf "%-26s %10s %10s %24s %13s %11s\n" "" "cpu ms" "wall ms" "cpu ns/call" "wall ns/call" "bytes/call"
printf "%-26s %10.1f %10.1f %24s %13s %11s\n" "plain" "$(awk -v t="$(med plain 2)" 'BEGIN{print t/1e6}')" "$(awk -v t="$(med plain 1)" 'BEGIN{print t/1e6}')" - - -
pcpu=$(med plain 2)
pwall=$(med plain 1)
for r in hk-task-clock hk-rdtsc uftrace; do
	case $r in hk-*) label="run.hookit -m ${r#hk-}"; b=${bytes[${r#hk-}]} ;; *) label="uftrace record"; b=${bytes[uftrace]} ;; esac
	printf "%-26s %10.1f %10.1f %24s %13s %11s\n" "$label" "$(awk -v t="$(med $r 2)" 'BEGIN{print t/1e6}')" "$(awk -v t="$(med $r 1)" 'BEGIN{print t/1e6}')" \
		"$(pc "$(med $r 2)" "$pcpu") ($(pc "$(lo $r 2)" "$pcpu")..$(pc "$(hi $r 2)" "$pcpu"))" "$(pc "$(med $r 1)" "$pwall")" "$(awk -v b="$b" -v c="$calls" 'BEGIN {printf "%.1f", b / c}')"
done
for m in task-clock rdtsc; do
	awk -v a="$(med hk-$m 2)" -v b="$(med uftrace 2)" -v p="$pcpu" -v wa="$(med hk-$m 1)" -v wb="$(med uftrace 1)" -v wp="$pwall" -v m=$m \
		'BEGIN {printf "hookit (%s) / uftrace per-call cost: cpu %.2f, wall %.2f (target <= 0.33)\n", m, (a - p) / (b - p), (wa - wp) / (wb - wp)}'
done
awk -v b="$base" -v p="$plain_ns" -v c="$calls" -v e="$errsum" -v src="$plain_src" \
	'BEGIN {printf "after calibration (task-clock): calibrated total %.1f ms, plain run %.1f ms (%s): residual %.2f ns per call; sum of log-gen ERR %.1f ms (%.2f ns per call)\n", b / 1e6, p / 1e6, src, (b - p) / c, e / 1e6, e / c}'
ms() { awk -v t="$(med "$1" "$2")" 'BEGIN {printf "%.0f", t / 1e6}'; }
echo
echo "reports of the same $calls calls (median of $RUNS):"
printf "%-44s %10s %10s %12s\n" "" "cpu ms" "wall ms" "peak RSS MB"
for r in rep-hk rep-hk-chrome rep-uf; do
	case $r in
	rep-hk) label="hookit report (log-rt, log-gen, pprof, folded)" ;;
	rep-hk-chrome) label="hookit report --chrome ($((chrome_bytes >> 20)) MB JSON)" ;;
	*) label="uftrace report" ;;
	esac
	printf "%-44s %10s %10s %12s\n" "$label" "$(ms $r 2)" "$(ms $r 1)" "$(awk -v k="$(med $r 3)" 'BEGIN {printf "%.1f", k / 1024}')"
done
awk -v a="$(med rep-hk 2)" -v b="$(med rep-uf 2)" -v wa="$(med rep-hk 1)" -v wb="$(med rep-uf 1)" \
	'BEGIN {printf "hookit report / uftrace report: cpu %.2f, wall %.2f (target <= 1)\n", a / b, wa / wb}'
echo
echo "whole run with its reports (median of $RUNS):"
printf "%-44s %10s %10s\n" "" "cpu ms" "wall ms"
printf "%-44s %10s %10s\n" "scripts/run.hookit" "$(ms whole-hk 2)" "$(ms whole-hk 1)"
printf "%-44s %10s %10s\n" "uftrace record && uftrace report" "$(ms whole-uf 2)" "$(ms whole-uf 1)"
awk -v a="$(med whole-hk 2)" -v b="$(med whole-uf 2)" -v wa="$(med whole-hk 1)" -v wb="$(med whole-uf 1)" \
	'BEGIN {printf "run.hookit / uftrace record && report: cpu %.2f, wall %.2f (target <= 1)\n", a / b, wa / wb}'

