#!/bin/bash
# hotspot overhead: the bundled example's cost per iteration of its main
# loop (its CPU time, probe traps included, per iteration: wall time would
# measure the other load of a shared machine) run plain, under the hot-spot walk with
# the probes always in place, and under the walk with --duty DUTY
# (`hotspot -s 1 --period DURATION -- example SECONDS`: one second of
# sampling, then one level per period until main). Runs interleaved, the
# best (lowest) of RUNS each: other load only ever adds CPU time per
# iteration (cache and core sharing), so the minimum is the cleanest figure. Goal: the target slows down by at most 5 % during the walk
# (checked on the --duty run).
#
#   bench/hotspot.sh [RUNS=5] [PERIOD=1s] [WORK=200000] [DUTY=20]
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-5}
PERIOD=${2:-1s}
WORK=${3:-200000}
DUTY=${4:-20}
[ "$(id -u)" = 0 ] || { echo "bench: run as root (uprobes need CAP_PERFMON)"; exit 1; }
make -s bin/hotspot bin/hotspot-example >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
per=$(awk -v p="$PERIOD" 'BEGIN {v = p + 0; if (p ~ /ms$/) v /= 1000; print v}')
SECS=$(awk -v p="$per" 'BEGIN {print 1 + 4 * p}') # sampling + the 4 levels hot, c x, b, a

# CPU microseconds per iteration, from the example's last line.
iters() { sed -n 's/^hotspot-example: iterations=\([0-9]*\) .* cpu_us=\([0-9]*\)$/\1 \2/p' | awk '{printf "%.3f\n", $2 / $1}'; }
best() { sort -n | head -1; }
for ((i = 0; i < RUNS; i++)); do
	bin/hotspot-example "$SECS" "$WORK" | iters >>"$tmp/plain" || true
	bin/hotspot -q -s 1 --period "$PERIOD" --json "$tmp/w$i.json" -o /dev/null -- bin/hotspot-example "$SECS" "$WORK" | iters >>"$tmp/walk" || true
	bin/hotspot -q -s 1 --period "$PERIOD" --duty "$DUTY" --json "$tmp/d$i.json" -o /dev/null -- bin/hotspot-example "$SECS" "$WORK" | iters >>"$tmp/duty" || true
done
p=$(best <"$tmp/plain")
w=$(best <"$tmp/walk")
d=$(best <"$tmp/duty")
hooks=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["hook_executions"])' "$tmp/w0.json")
dhooks=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["hook_executions"])' "$tmp/d0.json")
levels=$(python3 -c 'import json,sys; print(" | ".join(" ".join(l["frontier"]) for l in json.load(open(sys.argv[1]))["levels"]))' "$tmp/w0.json")
echo "hotspot overhead: bundled example, ${SECS}s runs (work $WORK), best of $RUNS, period $PERIOD"
printf '  %-32s %14s %10s\n' configuration "CPU us/iter" slowdown
printf '  %-32s %14s %10s\n' "plain" "$p" "-"
awk -v p="$p" -v w="$w" 'BEGIN {printf "  %-32s %14s %+9.1f%%\n", "under the walk, --duty 100", w, (w-p)*100/p}'
awk -v p="$p" -v w="$d" -v d="$DUTY" 'BEGIN {printf "  %-32s %14s %+9.1f%%\n", "under the walk, --duty " d, w, (w-p)*100/p}'
echo "  levels: $levels; probe hits in one walk: $hooks (--duty 100), $dhooks (--duty $DUTY)"
awk -v p="$p" -v w="$d" 'BEGIN {s = (w-p)*100/p; if (s > 5) {printf "  slowdown %.1f%% is above the 5%% goal\n", s; exit 1} else printf "  slowdown %.1f%% <= 5%%: ok\n", s}'
