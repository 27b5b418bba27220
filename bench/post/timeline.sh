#!/bin/bash
# The cost of post --timeline against post -tprof, side by side, on the
# real traces with call stacks of bench/post/real.sh (about 1 M records
# each: a tick and its stack per sample; recorded by real.sh -R when
# missing, which needs root and perf): the time line in trace-event JSON
# (t.json) and in Perfetto's protobuf format (t.pftrace). The three
# commands take turns RUNS times, each run a fresh process with a warm
# table cache (its first run fills it). Printed: the ticks, each time
# line's size, the best wall and the least CPU time (user+system) of
# each, and each time line's over -tprof's.
#
#   bench/post/timeline.sh [-d DIR] [-n RUNS=3] [WORKLOAD...]   (xz python system)
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=/var/tmp/perfinsp-post-bench
runs=3
while getopts d:n: o; do
	case $o in
	d) dir=$OPTARG ;;
	n) runs=$OPTARG ;;
	*) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
workloads=("$@")
[ ${#workloads[@]} -gt 0 ] || workloads=(xz python system)
make -s build >/dev/null
for w in "${workloads[@]}"; do
	[ -s "$dir/$w-stacks.nrm2" ] || bash bench/post/real.sh -d "$dir" -R -k stacks "$w"
done

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

printf '%-7s %8s %7s %7s  %7s %7s  %7s %7s %6s %6s  %7s %7s %6s %6s\n' trace ticks json_MB pf_MB tprof_s cpu_s json_s cpu_s x_wall x_cpu pf_s cpu_s x_wall x_cpu
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
for w in "${workloads[@]}"; do
	out=$dir/out-timeline-$w
	cache=$dir/a2n-cache-timeline-$w
	mkdir -p "$out"
	rm -rf "$cache"
	common=(--cache-dir "$cache" -r "$dir/$w-stacks.nrm2" -o "$out")
	bin/post "${common[@]}" -tprof >/dev/null 2>&1 # fills the table cache
	ticks=$(awk '/Total Ticks/ {print $4; exit}' "$out/tprof.out")
	WALL=() CPU=()
	for ((i = 0; i < runs; i++)); do
		once tprof bin/post "${common[@]}" -tprof
		once timeline bin/post "${common[@]}" --timeline "$out/t.json"
		once perfetto bin/post "${common[@]}" --timeline "$out/t.pftrace"
	done
	printf '%-7s %8s %7s %7s  %7s %7s  %7s %7s %6s %6s  %7s %7s %6s %6s\n' "$w" "$ticks" \
		"$(($(stat -c %s "$out/t.json") >> 20))" "$(($(stat -c %s "$out/t.pftrace") >> 20))" \
		"${WALL[tprof]}" "${CPU[tprof]}" \
		"${WALL[timeline]}" "${CPU[timeline]}" "$(ratio "${WALL[timeline]}" "${WALL[tprof]}")" "$(ratio "${CPU[timeline]}" "${CPU[tprof]}")" \
		"${WALL[perfetto]}" "${CPU[perfetto]}" "$(ratio "${WALL[perfetto]}" "${WALL[tprof]}")" "$(ratio "${CPU[perfetto]}" "${CPU[tprof]}")"
	rm -f "$out/t.json" "$out/t.pftrace"
done
echo "(best wall and least CPU of $runs runs each, taking turns; x: --timeline over -tprof; load: $(uptime | sed 's/.*load average/load average/'))"
