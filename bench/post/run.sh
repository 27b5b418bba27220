#!/bin/bash
# post benchmarks, figures side by side in one run:
#  (a) agreement with perf: the bundled example profiled by `perf record -e cpu-clock`
#      and by run.tprof; symbol percentages of the example's samples, side by side.
#  (b) speed: tprof.out from a trace of about N samples (default 1,000,000) vs
#      (perf has no tid sort key: its "pid" key is the thread, shown as pid:comm)
#      `perf report --stdio --sort pid,dso,sym` on a perf.data of about the same count.
#
#   bench/post/run.sh [N=1000000]
set -euo pipefail
cd "$(dirname "$0")/../.."
N=${1:-1000000}
[ "$(id -u)" = 0 ] || { echo "bench: run as root"; exit 1; }
command -v perf >/dev/null || { echo "bench: perf is not installed (apt-get install linux-perf)"; exit 1; }
make -s build >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"; bin/swtrace free >/dev/null 2>&1 || true' EXIT
UNITS=300

echo "(a) agreement with perf on cpuburn $UNITS (percent of the example's own samples)"
perf record -q -e cpu-clock -F 1000 -o "$tmp/a.data" -- bin/cpuburn $UNITS >/dev/null 2>&1
perf report -i "$tmp/a.data" --stdio --sort sym 2>/dev/null | awk '$1 ~ /%$/ {gsub("%","",$1); print $NF, $1}' >"$tmp/perf.pct"
here=$PWD; (cd "$tmp" && "$here/scripts/run.tprof" -r 1000 -- "$here/bin/cpuburn" $UNITS >/dev/null)
bin/post -r "$tmp/swtrace.nrm2" --folded "$tmp/t.folded" -o "$tmp" >/dev/null
awk '/^cpuburn \(pid / {c = $NF; st = substr($0, 1, length($0) - length(c) - 1); split(st, p, ";"); n[p[3]] += c; t += c} END {for (s in n) printf "%s %.2f\n", s, 100 * n[s] / t}' "$tmp/t.folded" >"$tmp/ours.pct"
printf '  %-10s %8s %8s %8s\n' symbol perf run.tprof diff
worst=0
for s in heavy medium light; do
	a=$(awk -v s=$s '$1 == s {print $2}' "$tmp/perf.pct"); a=${a:-0}
	b=$(awk -v s=$s '$1 == s {print $2}' "$tmp/ours.pct"); b=${b:-0}
	d=$(awk -v a="$a" -v b="$b" 'BEGIN {d = b - a; printf "%+.2f", d}')
	printf '  %-10s %7.2f%% %7.2f%% %8s\n' $s "$a" "$b" "$d"
	worst=$(awk -v w="$worst" -v d="$d" 'BEGIN {d = d < 0 ? -d : d; print (d > w ? d : w)}')
done
echo "  largest difference: $worst points (target: within 2)"

echo "(b) speed on about $N samples"
# Both tools sample both CPUs at 25 kHz while the example runs until N samples are reached.
rate=25000
secs=$(awk -v n="$N" -v r=$rate 'BEGIN {printf "%.0f", n / (2 * r) + 1}')
units=$((secs * 100 + 100))
perf record -q -a -e cpu-clock -c $((1000000000 / rate)) -o "$tmp/b.data" -- bin/cpuburn $units >/dev/null 2>&1
psamples=$(perf report -i "$tmp/b.data" --stdio --sort pid 2>/dev/null | awk -v p=$((1000000000 / rate)) '/^# Event count/ {c = $NF} END {printf "%.0f", c / p}')
bin/swtrace free >/dev/null 2>&1 || true
bin/swtrace mode normal >/dev/null
bin/swtrace init -t 64M -m 4M >/dev/null
bin/swtrace enable tprof >/dev/null
bin/swtrace setrate $rate >/dev/null
bin/swtrace on >/dev/null
bin/cpuburn $units >/dev/null
bin/swtrace off >/dev/null
bin/swtrace get "$tmp/b.nrm2" >/dev/null
ns() { date +%s%N; }
s=$(ns); perf report -i "$tmp/b.data" --stdio --sort pid,dso,sym >"$tmp/perf.txt" 2>/dev/null; e=$(ns); perf_ms=$(((e - s) / 1000000))
s=$(ns); bin/post -r "$tmp/b.nrm2" -tprof -o "$tmp" >/dev/null; e=$(ns); post_ms=$(((e - s) / 1000000))
ticks=$(awk '/Total Ticks/ && !t {t = $4} END {print t}' "$tmp/tprof.out")
printf '  %-52s %10s %10s\n' "" samples "time ms"
printf '  %-52s %10s %10s\n' "perf report --stdio --sort pid,dso,sym" "$psamples" "$perf_ms"
printf '  %-52s %10s %10s\n' "post -tprof" "$ticks" "$post_ms"
awk -v a="$perf_ms" -v b="$post_ms" -v pa="$psamples" -v pb="$ticks" 'BEGIN {printf "  per sample: post is %.1fx faster than perf report (target: at least 5x)\n", (a / pa) / (b / pb)}'
