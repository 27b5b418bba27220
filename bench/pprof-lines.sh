#!/bin/bash
# The cost of post --pprof (real mappings, addresses and source lines from
# DWARF) against post -tprof (the names only), side by side, on traces
# with call stacks of -O2 programs with DWARF:
#   libc   bench/pprofwork.c built -O2 -g: its time spread over its own
#          functions and many of glibc's (whose DWARF is in the debug file
#          of libc6-dbg, when installed)
#   go     post itself (a Go binary, DWARF included) writing a report
# Each trace is recorded once (scripts/run.tprof -g through a private
# daemon; kept in DIR, delete them to record again), then the two
# commands take turns RUNS times, each run a fresh process with a warm
# table cache (its first run fills it), the report selected to the
# workload's process (--comm). Printed: the best wall and the least CPU
# time of each, and --pprof's over -tprof's.
#
#   bench/pprof-lines.sh [-d DIR] [-r RATE=5000] [-s SECONDS=10] [-n RUNS=5] [WORKLOAD...]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=/var/tmp/perfinsp-pprof-bench
rate=5000
secs=10
runs=5
while getopts d:r:s:n: o; do
	case $o in
	d) dir=$OPTARG ;;
	r) rate=$OPTARG ;;
	s) secs=$OPTARG ;;
	n) runs=$OPTARG ;;
	*) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
workloads=("$@")
[ ${#workloads[@]} -gt 0 ] || workloads=(libc go)
[ "$(id -u)" = 0 ] || { echo "bench: run as root (the trace facility samples system-wide)"; exit 1; }
command -v gcc >/dev/null || { echo "bench: gcc is not installed (apt-get install gcc)"; exit 1; }
[ -n "$(ls /usr/lib/debug/.build-id 2>/dev/null)" ] || echo "bench: note: no debug files in /usr/lib/debug (apt-get install libc6-dbg): glibc's frames get no source lines" >&2
make -s build >/dev/null
mkdir -p "$dir/home" "$dir/run"
# A daemon of its own (not the system's socket), its state in DIR.
export HOME=$dir/home XDG_CACHE_HOME=$dir/home/.cache PERFINSP_SOCKET=$dir/run/pitraced.sock \
	PERFINSP_PITRACED=$PWD/bin/pitraced PERFINSP_BACKEND=daemon
stop_daemon() {
	bin/swtrace free >/dev/null 2>&1 || true
	local pid
	for pid in $(sed -n 's/.*(pid \([0-9]*\)).*/\1/p' "$dir/run/pitraced.log" 2>/dev/null); do
		kill -INT "$pid" 2>/dev/null || true
	done
}
trap stop_daemon EXIT

record() { # workload
	local w=$1 cmd
	case $w in
	libc)
		gcc -O2 -g -fno-omit-frame-pointer -Wall -o "$dir/pprofwork" bench/pprofwork.c
		cmd=("$dir/pprofwork" "$secs") ;;
	go)
		# post's own report of the libc trace, over and over for SECONDS
		[ -s "$dir/libc.nrm2" ] || record libc
		cp bin/post "$dir/post"
		cmd=(timeout "$secs" bash -c "while :; do '$dir/post' --no-cache -r '$dir/libc.nrm2' -tprof --folded /dev/null -o '$dir/go-out' >/dev/null; done") ;;
	*) echo "bench: unknown workload $w (libc, go)"; exit 2 ;;
	esac
	echo "recording $w for $secs s at $rate Hz ..." >&2
	mkdir -p "$dir/rec-$w"
	scripts/run.tprof -g -r "$rate" -t 512M -o "$dir/rec-$w" -- "${cmd[@]}" >/dev/null 2>"$dir/rec-$w/run.log" || true
	mv "$dir/rec-$w/swtrace.nrm2" "$dir/$w.nrm2"
}

# once KEY CMD...: one timed run; keeps the best wall and least CPU seconds.
declare -A WALL CPU
once() {
	local k=$1 t u s TIMEFORMAT='%3R %3U %3S'
	shift
	{ time "$@" >/dev/null 2>&1; } 2>"$dir/.time"
	read -r t u s <"$dir/.time"
	WALL[$k]=$(awk -v a="${WALL[$k]:-1e9}" -v b="$t" 'BEGIN {print (b < a ? b : a)}')
	CPU[$k]=$(awk -v a="${CPU[$k]:-1e9}" -v b="$u" -v c="$s" 'BEGIN {print (b + c < a ? b + c : a)}')
}

printf '%-6s %8s  %-22s %7s %7s  %-22s %7s %7s  %6s %6s\n' trace ticks "name only" wall_s cpu_s "with lines" wall_s cpu_s x_wall x_cpu
for w in "${workloads[@]}"; do
	[ -s "$dir/$w.nrm2" ] || record "$w"
	comm=pprofwork
	[ "$w" = go ] && comm=post
	out=$dir/out-$w
	cache=$dir/a2n-cache-$w
	mkdir -p "$out"
	rm -rf "$cache"
	common=(--cache-dir "$cache" -r "$dir/$w.nrm2" --comm "$comm" -o "$out")
	bin/post "${common[@]}" -tprof >/dev/null 2>&1 # fills the table cache
	ticks=$(awk '/Total Ticks/ {print $4; exit}' "$out/tprof.out")
	WALL=() CPU=()
	for ((i = 0; i < runs; i++)); do
		once tprof bin/post "${common[@]}" -tprof
		once pprof bin/post "${common[@]}" --pprof "$out/p.pb.gz"
	done
	printf '%-6s %8s  %-22s %7s %7s  %-22s %7s %7s  %6s %6s\n' "$w" "$ticks" "post -tprof" "${WALL[tprof]}" "${CPU[tprof]}" "post --pprof" "${WALL[pprof]}" "${CPU[pprof]}" \
		"$(awk -v a="${WALL[pprof]}" -v b="${WALL[tprof]}" 'BEGIN {printf "%.2f", a / b}')" \
		"$(awk -v a="${CPU[pprof]}" -v b="${CPU[tprof]}" 'BEGIN {printf "%.2f", a / b}')"
done
echo "(best wall and least CPU of $runs runs each, taking turns; x: --pprof over -tprof)"
