#!/bin/bash
# Continuous profiling cost, side by side with perf: on a busy machine (the
# bundled cpuburn keeps every CPU busy), for SECS seconds each,
#   (1) pitraced continuous --rate HZ --interval 15s (frame-pointer stacks,
#       names resolved on the node, OTLP/HTTP to a local endpoint, otlpsink),
#   (2) perf record -a -g -F HZ writing to a file (no names resolved).
# Prints each one's CPU time (user + system) as a share of one CPU and per
# sample, its maximum RSS, its sample count, and for the agent the bytes
# per sample on the wire. Run as root.
# The agent's symbol cache starts empty: its first interval parses every
# module sampled (a deployed agent keeps the cache across restarts), and
# every program the machine runs meanwhile is named too, where perf only
# records; the line after the table is the agent from the end of its
# first interval on.
#
#   bench/continuous.sh [SECS=60] [HZ=97]
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-60}
HZ=${2:-97}
[ "$(id -u)" = 0 ] || { echo "bench: run as root (system-wide sampling)"; exit 1; }
command -v perf >/dev/null || { echo "bench: perf is not installed (apt-get install linux-perf; scripts/deps/base.txt)"; exit 1; }
[ -x /usr/bin/time ] || { echo "bench: /usr/bin/time is not installed (apt-get install time)"; exit 1; }
tmp=$(mktemp -d)
burn_pid=
sink_pid=
cleanup() {
	[ -n "$burn_pid" ] && kill "$burn_pid" 2>/dev/null || true
	[ -n "$sink_pid" ] && kill "$sink_pid" 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT
go build -o "$tmp/" ./daemon/cmd/pitraced ./bench/otlpsink
gcc -O2 -g -fno-omit-frame-pointer -pthread -o "$tmp/cpuburn" examples/cpuburn.c
port=$((20000 + RANDOM % 20000))
"$tmp/otlpsink" -listen "127.0.0.1:$port" >"$tmp/sink.out" 2>"$tmp/sink.err" &
sink_pid=$!
# Load: cpuburn's two threads, long enough for both runs.
"$tmp/cpuburn" $(( (2 * SECS + 30) * 100 )) >/dev/null &
burn_pid=$!
sleep 1

/usr/bin/time -o "$tmp/agent.time" -f "%U %S %M" "$tmp/pitraced" continuous --endpoint "http://127.0.0.1:$port" \
	--rate "$HZ" --interval 15s --symbol-cache "$tmp/a2n" --duration "${SECS}s" 2>"$tmp/agent.err"
kill "$sink_pid"
wait "$sink_pid" 2>/dev/null || true
sink_pid=
/usr/bin/time -o "$tmp/perf.time" -f "%U %S %M" perf record -q -a -g -F "$HZ" -o "$tmp/perf.data" -- sleep "$SECS" 2>"$tmp/perf.err"

agent_samples=$(sed -n 's/.*stopped after [0-9]* intervals: \([0-9]*\) samples.*/\1/p' "$tmp/agent.err")
read -r _ agent_recv agent_bytes < <(sed -n 's/^requests \([0-9]*\) samples \([0-9]*\) bytes \([0-9]*\)/\1 \2 \3/p' "$tmp/sink.out")
perf_samples=$(perf report -i "$tmp/perf.data" --stats 2>/dev/null | awk '/^ *SAMPLE events:/ {print $3; exit}')
perf_bytes=$(stat -c %s "$tmp/perf.data")
row() { # name user sys maxrss_kb samples bytes
	awk -v n="$1" -v u="$2" -v s="$3" -v m="$4" -v k="$5" -v b="$6" -v secs="$SECS" 'BEGIN {
		cpu = u + s
		printf "%-26s %7.2f s %6.2f %% %8.1f us %7.1f MiB %8d %8.1f\n", n, cpu, 100 * cpu / secs, k ? 1e6 * cpu / k : 0, m / 1024, k, k ? b / k : 0 }'
}
echo "$SECS s at $HZ Hz per CPU on $(nproc) CPUs, cpuburn keeping them busy"
printf "%-26s %9s %8s %11s %11s %8s %8s\n" "" "CPU" "of 1 CPU" "per sample" "max RSS" "samples" "B/sample"
read -r u s m <"$tmp/agent.time"
row "pitraced continuous" "$u" "$s" "$m" "${agent_samples:-0}" "${agent_bytes:-0}"
read -r u s m <"$tmp/perf.time"
row "perf record -a -g" "$u" "$s" "$m" "${perf_samples:-0}" "$perf_bytes"
echo "(agent: bytes per sample are OTLP/HTTP request bodies, $agent_recv samples received; perf: bytes of perf.data, names not resolved)"
# The agent's steady state: from the end of its first interval (symbol
# tables of the running programs loaded, the kernel's parsed) to its stop.
awk -v secs="$SECS" '
	function cpu(s) { sub(/,$/, "", s); if (s ~ /ms$/) return substr(s, 1, length(s) - 2) / 1000; if (s ~ /µs$/) return 0; return substr(s, 1, length(s) - 1) + 0 }
	/ interval 1: / { for (i = 1; i <= NF; i++) { if ($i == "CPU") c1 = cpu($(i + 1)); if ($i == "samples" && !s1) s1 = $(i - 1) } }
	/stopped after/ { for (i = 1; i <= NF; i++) { if ($i == "CPU") c2 = cpu($(i + 1)) } match($0, /intervals: [0-9]+/); s2 = substr($0, RSTART + 11, RLENGTH - 11) }
	END { if (s2 + 0 > s1 + 0 && c1) printf "agent after its first interval: %.2f s CPU for %d samples, %.1f us per sample\n", c2 - c1, s2 - s1, 1e6 * (c2 - c1) / (s2 - s1) }' "$tmp/agent.err"
grep "stopped after" "$tmp/agent.err" || true
