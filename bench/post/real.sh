#!/bin/bash
# post's speed against perf report on real traces, side by side.
#
# Three workloads, each traced by both tools at the same rate in the same
# run (perf record -a -e cpu-clock and the trace facility's tprof, both
# system-wide, started before and stopped after the workload):
#   xz       xz -T2 compressing a generated file
#   python   a CPU-bound Python program
#   system   many short processes (shell pipelines, gzip, sort) next to xz
# each twice: flat (no stacks) and with call stacks (perf record -g;
# swtrace enable callstack). Then each report is timed RUNS times (perf
# PERF_RUNS), the commands taking turns, a run of each in a round:
#   flat:   perf report --stdio --no-children   vs  post -tprof
#   stacks: perf report --stdio --children      vs  post -tprof (call-tree
#           section), post --pprof, post --folded
# and the ticks/samples count, the best and worst wall time, the least CPU
# time (user+system) and the max RSS of each are printed, with post's
# speed-up per sample over perf report by wall and by CPU time. post runs
# with its table cache (in DIR/a2n-cache, emptied per trace: the first run
# fills it and is printed once) and without it (--no-cache). Traces are kept in DIR and reused by later runs
# (delete the trace files in DIR to record again).
#
#   bench/post/real.sh [-d DIR] [-r RATE=10000] [-s SECONDS=50] [-n RUNS=2] [-p PERF_RUNS=RUNS]
#                      [-k KINDS="flat stacks"] [-R] [WORKLOAD...]
# (perf report --children of a 1 M-sample trace takes minutes: -p 1 saves them;
# -k flat runs the flat reports only; -R records the traces and times nothing.)
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=/var/tmp/perfinsp-post-bench
rate=10000
secs=50
runs=2
perfruns=
kinds="flat stacks"
recordonly=
while getopts d:r:s:n:p:k:R o; do
	case $o in
	d) dir=$OPTARG ;;
	r) rate=$OPTARG ;;
	s) secs=$OPTARG ;;
	n) runs=$OPTARG ;;
	p) perfruns=$OPTARG ;;
	k) kinds=$OPTARG ;;
	R) recordonly=1 ;;
	*) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
perfruns=${perfruns:-$runs}
workloads=("$@")
[ ${#workloads[@]} -gt 0 ] || workloads=(xz python system)
[ "$(id -u)" = 0 ] || { echo "bench: run as root (system-wide tracing)"; exit 1; }
command -v perf >/dev/null || { echo "bench: perf is not installed (apt-get install linux-perf)"; exit 1; }
command -v xz >/dev/null || { echo "bench: xz is not installed (apt-get install xz-utils)"; exit 1; }
PY=$(command -v python3) || { echo "bench: python3 is not installed (apt-get install python3)"; exit 1; }
[ -x /usr/bin/time ] || { echo "bench: /usr/bin/time is not installed (apt-get install time)"; exit 1; }
make -s build >/dev/null
mkdir -p "$dir"
SW=bin/swtrace

# The workloads run for about SECONDS each (both CPUs sampled: about
# 2 * RATE * SECONDS samples, idle included).
input() {
	[ -s "$dir/input.bin" ] || { head -c 64M /dev/urandom | base64 >"$dir/input.bin"; }
}
work_xz() { input; timeout "$secs" bash -c "while :; do xz -T2 -6 -c '$dir/input.bin' >/dev/null; done" || true; }
work_python() {
	timeout "$secs" "$PY" -c '
import json, re
def fib(n): return n if n < 2 else fib(n - 1) + fib(n - 2)
while True:
    d = {str(i): [i, str(i) * 3, {"k": i * 1.5}] for i in range(20000)}
    s = json.dumps(d)
    json.loads(s)
    sorted(re.findall(r"[0-9]+", s))
    fib(22)
' || true
}
work_system() {
	input
	timeout "$secs" bash -c "while :; do xz -T1 -c '$dir/input.bin' >/dev/null; done" &
	local x=$!
	timeout "$secs" bash -c "while :; do ls /usr/bin | sort | md5sum >/dev/null; head -c 2M '$dir/input.bin' | gzip -c | wc -c >/dev/null; sh -c 'grep -c a /etc/services' >/dev/null; done" || true
	wait $x || true
}

record() { # workload, flat|stacks
	local w=$1 kind=$2 pflags=() sflags=(tprof) tsize=128M
	if [ "$kind" = stacks ]; then pflags=(-g); sflags=(tprof callstack); tsize=512M; fi
	echo "recording $w ($kind) for $secs s at $rate Hz ..." >&2
	$SW free >/dev/null 2>&1 || true
	$SW mode normal >/dev/null
	$SW init -t $tsize -m 8M >/dev/null
	$SW enable --only "${sflags[@]}" >/dev/null
	$SW setrate "$rate" >/dev/null
	perf record -q -a -e cpu-clock -F "$rate" "${pflags[@]}" -o "$dir/$w-$kind.data" >/dev/null 2>&1 &
	local pp=$!
	# perf is ready once it has written its header and synthesized the
	# existing processes (the file grows past its header).
	for _ in $(seq 100); do [ "$(stat -c %s "$dir/$w-$kind.data" 2>/dev/null || echo 0)" -gt 100000 ] && break; sleep 0.1; done
	$SW on --discard >/dev/null
	"work_$w"
	$SW off >/dev/null 2>&1 || echo "bench: warning: swtrace off failed (a buffer filled?)" >&2
	kill -INT $pp; wait $pp 2>/dev/null || true
	$SW get "$dir/$w-$kind.nrm2" >/dev/null
	$SW free >/dev/null 2>&1 || true
}

# once KEY CMD...: one timed run of CMD, kept under KEY: the best and
# worst wall seconds, the least user+system CPU seconds and the largest
# max RSS of KEY's runs (stats KEY prints them: "best worst cpu rss_MB").
# On a shared machine CPU time is the steadier figure.
declare -A BEST WORST CPU RSS
# once KEY CMD...: one run of CMD, its wall and CPU time (bash's time, to the
# millisecond: /usr/bin/time's 10 ms steps are too coarse for post's reports)
# and its max RSS (/usr/bin/time, whose own start both tools' times carry).
once() {
	local k=$1 t u s m TIMEFORMAT='%3R %3U %3S'
	shift
	{ time /usr/bin/time -f '%M' -o "$dir/.rss" "$@" >/dev/null 2>&1; } 2>"$dir/.time"
	read -r t u s <"$dir/.time"
	read -r m <"$dir/.rss"
	BEST[$k]=$(awk -v a="${BEST[$k]:-1e9}" -v b="$t" 'BEGIN {print (b < a ? b : a)}')
	WORST[$k]=$(awk -v a="${WORST[$k]:-0}" -v b="$t" 'BEGIN {print (b > a ? b : a)}')
	CPU[$k]=$(awk -v a="${CPU[$k]:-1e9}" -v b="$u" -v c="$s" 'BEGIN {print (b + c < a ? b + c : a)}')
	[ "$m" -gt "${RSS[$k]:-0}" ] && RSS[$k]=$m
	return 0
}
stats() { echo "${BEST[$1]} ${WORST[$1]} ${CPU[$1]} $((${RSS[$1]} / 1024))"; }

perf_samples() { perf report -i "$1" --stats 2>/dev/null | awk '/SAMPLE events:/ {print $3; exit}'; }
ticks() { awk '/Total Ticks/ {print $4; exit}' "$1"; }

cache=$dir/a2n-cache
printf '%-8s %-7s %-28s %9s %7s %7s %7s %6s %6s %6s\n' trace kind command samples wall_s worst_s cpu_s rss_MB x_wall x_cpu
row() { # workload kind command samples best worst cpu rss [perf: best cpu samples]
	local x= y=
	if [ $# -gt 8 ]; then
		x=$(awk -v a="$9" -v b="$5" -v pa="${11}" -v pb="$4" 'BEGIN {printf "%.1f", (a / pa) / (b / pb)}')
		y=$(awk -v a="${10}" -v b="$7" -v pa="${11}" -v pb="$4" 'BEGIN {printf "%.1f", (a / pa) / (b / pb)}')
	fi
	printf '%-8s %-7s %-28s %9s %7s %7s %7s %6s %6s %6s\n' "$1" "$2" "$3" "$4" "$5" "$6" "$7" "$8" "$x" "$y"
}
for w in "${workloads[@]}"; do
	for kind in $kinds; do
		[ -s "$dir/$w-$kind.nrm2" ] && [ -s "$dir/$w-$kind.data" ] || record "$w" "$kind"
		[ -z "$recordonly" ] || continue
		out=$dir/out-$w-$kind
		mkdir -p "$out"
		ps=$(perf_samples "$dir/$w-$kind.data")
		if [ "$kind" = flat ]; then
			pcmd=(perf report -i "$dir/$w-$kind.data" --stdio --no-children)
		else
			pcmd=(perf report -i "$dir/$w-$kind.data" --stdio --children)
		fi
		# post's table cache starts empty: the first run below parses the
		# tables and stores them (its time is printed as "cache filled"),
		# the timed runs map them; --no-cache parses every time.
		rm -rf "$cache"
		BEST=() WORST=() CPU=() RSS=()
		once filled bin/post --cache-dir "$cache" -r "$dir/$w-$kind.nrm2" -tprof -o "$out"
		tk=$(ticks "$out/tprof.out")
		# The commands take turns, a run of each in a round, so that each
		# speed-up compares runs of the same minutes (a shared VM's speed
		# drifts between minutes).
		for ((i = 0; i < (runs > perfruns ? runs : perfruns); i++)); do
			((i >= perfruns)) || once perf "${pcmd[@]}"
			((i >= runs)) && continue
			once nocache bin/post --no-cache -r "$dir/$w-$kind.nrm2" -tprof -o "$out"
			once tprof bin/post --cache-dir "$cache" -r "$dir/$w-$kind.nrm2" -tprof -o "$out"
			if [ "$kind" = stacks ]; then
				once pprof bin/post --cache-dir "$cache" -r "$dir/$w-$kind.nrm2" --pprof "$out/p.pb.gz" -o "$out"
				once folded bin/post --cache-dir "$cache" -r "$dir/$w-$kind.nrm2" --folded "$out/f.folded" -o "$out"
			fi
		done
		read -r pb pw pc pr < <(stats perf)
		row "$w" "$kind" "perf report ${pcmd[*]:5}" "$ps" "$pb" "$pw" "$pc" "$pr"
		read -r b wst c r < <(stats filled)
		row "$w" "$kind" "post -tprof (cache filled)" "$tk" "$b" "$b" "$c" "$r" "$pb" "$pc" "$ps"
		read -r b wst c r < <(stats nocache)
		row "$w" "$kind" "post -tprof --no-cache" "$tk" "$b" "$wst" "$c" "$r" "$pb" "$pc" "$ps"
		read -r b wst c r < <(stats tprof)
		row "$w" "$kind" "post -tprof" "$tk" "$b" "$wst" "$c" "$r" "$pb" "$pc" "$ps"
		if [ "$kind" = stacks ]; then
			read -r b wst c r < <(stats pprof)
			row "$w" "$kind" "post --pprof" "$tk" "$b" "$wst" "$c" "$r" "$pb" "$pc" "$ps"
			read -r b wst c r < <(stats folded)
			row "$w" "$kind" "post --folded" "$tk" "$b" "$wst" "$c" "$r" "$pb" "$pc" "$ps"
		fi
	done
done
echo "(x_wall, x_cpu: perf report's time per sample over post's, best wall and least CPU of $runs runs; target at least 8x)"
