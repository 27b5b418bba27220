#!/bin/bash
# Continuous profiling cost, side by side with perf: on a busy machine (the
# bundled cpuburn keeps every CPU busy), for SECS seconds each, in ROUNDS
# rounds taking turns,
#   (1) pitraced continuous --rate HZ --interval 15s (frame-pointer stacks,
#       names resolved on the node, OTLP/HTTP to a local endpoint, otlpsink),
#   (2) perf record -a -g -F HZ writing to a file (no names resolved).
# Prints for each the median over the rounds of its CPU time (user +
# system) as a share of one CPU (and its range) and per sample, its maximum
# RSS, its sample count, and for the agent the bytes per sample on the
# wire. Run as root.
# The agent's symbol cache is warm, as a deployed agent's is across
# restarts: a first run (not measured) fills it, then every measured run
# reads the running programs' tables from it in its first interval; every
# program the machine runs meanwhile is named too, where perf only
# records. The table's "steady" column is the agent from the end of its
# first interval on.
# With --vs REV the agent of git revision REV is built too and takes its
# turn in every round (after the agent: a third row, its own symbol
# cache warmed the same way).
#
#   bench/continuous.sh [--vs REV] [SECS=60] [HZ=97] [ROUNDS=3]
set -euo pipefail
cd "$(dirname "$0")/.."
VS=
if [ "${1:-}" = --vs ]; then
	[ $# -ge 2 ] || { echo "bench: --vs needs a git revision" >&2; exit 2; }
	VS=$2
	shift 2
fi
SECS=${1:-60}
HZ=${2:-97}
ROUNDS=${3:-3}
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
if [ -n "$VS" ]; then
	mkdir -p "$tmp/vs"
	git archive "$VS" | tar -x -C "$tmp/vs"
	(cd "$tmp/vs" && go build -o "$tmp/pitraced-vs" ./daemon/cmd/pitraced)
fi
gcc -O2 -g -fno-omit-frame-pointer -pthread -o "$tmp/cpuburn" examples/cpuburn.c
# Load: cpuburn's two threads, long enough for every run.
runs=2
[ -n "$VS" ] && runs=3
"$tmp/cpuburn" $(( (runs * ROUNDS * SECS + 120) * 100 )) >/dev/null &
burn_pid=$!
sleep 1

# agent_run N [SECS [AGENT]]: one run of the agent (pitraced, or AGENT:
# pitraced-vs), the symbol cache shared by the runs of each. Writes
# "cpu_s maxrss_kb samples bytes steady_us load" to $tmp/res.AGENT.N.
agent_run() {
	local n=$1 secs=${2:-$SECS} who=${3:-agent} port load bin=pitraced cache=a2n
	if [ "$who" = vs ]; then
		bin=pitraced-vs cache=a2n-vs n=vs.$n
	fi
	port=$((20000 + RANDOM % 20000))
	"$tmp/otlpsink" -listen "127.0.0.1:$port" >"$tmp/sink.$n.out" 2>"$tmp/sink.$n.err" &
	sink_pid=$!
	load=$(cut -d' ' -f1 /proc/loadavg)
	/usr/bin/time -o "$tmp/agent.$n.time" -f "%U %S %M" "$tmp/$bin" continuous --endpoint "http://127.0.0.1:$port" \
		--rate "$HZ" --interval 15s --symbol-cache "$tmp/$cache" --duration "${secs}s" 2>"$tmp/agent.$n.err"
	kill "$sink_pid"
	wait "$sink_pid" 2>/dev/null || true
	sink_pid=
	local u s m samples bytes steady
	read -r u s m <"$tmp/agent.$n.time"
	samples=$(sed -n 's/.*stopped after [0-9]* intervals: \([0-9]*\) samples.*/\1/p' "$tmp/agent.$n.err")
	bytes=$(sed -n 's/^requests [0-9]* samples [0-9]* bytes \([0-9]*\)/\1/p' "$tmp/sink.$n.out")
	# The steady state: from the end of the first interval (symbol tables
	# of the running programs loaded, the kernel's parsed) to the stop.
	steady=$(awk '
		function cpu(s) { sub(/,$/, "", s); if (s ~ /ms$/) return substr(s, 1, length(s) - 2) / 1000; if (s ~ /µs$/) return 0; return substr(s, 1, length(s) - 1) + 0 }
		/ interval 1: / { for (i = 1; i <= NF; i++) { if ($i == "CPU") c1 = cpu($(i + 1)); if ($i == "samples" && !s1) s1 = $(i - 1) } }
		/stopped after/ { for (i = 1; i <= NF; i++) { if ($i == "CPU") c2 = cpu($(i + 1)) } match($0, /intervals: [0-9]+/); s2 = substr($0, RSTART + 11, RLENGTH - 11) }
		END { if (s2 + 0 > s1 + 0 && c1) printf "%.1f", 1e6 * (c2 - c1) / (s2 - s1); else printf "0" }' "$tmp/agent.$n.err")
	echo "$(awk -v u="$u" -v s="$s" 'BEGIN { print u + s }') $m ${samples:-0} ${bytes:-0} $steady $load" >"$tmp/res.$who.${n#vs.}"
}

# perf_run N: one run of perf record -a -g; the same fields (no steady state).
perf_run() {
	local n=$1 load u s m samples
	load=$(cut -d' ' -f1 /proc/loadavg)
	/usr/bin/time -o "$tmp/perf.$n.time" -f "%U %S %M" perf record -q -a -g -F "$HZ" -o "$tmp/perf.$n.data" -- sleep "$SECS" 2>"$tmp/perf.$n.err"
	read -r u s m <"$tmp/perf.$n.time"
	samples=$(perf report -i "$tmp/perf.$n.data" --stats 2>/dev/null | awk '/^ *SAMPLE events:/ {print $3; exit}')
	echo "$(awk -v u="$u" -v s="$s" 'BEGIN { print u + s }') $m ${samples:-0} $(stat -c %s "$tmp/perf.$n.data") 0 $load" >"$tmp/res.perf.$n"
	rm -f "$tmp/perf.$n.data"
}

echo "warming the agent's symbol cache (20 s)" >&2
agent_run warm 20
rm -f "$tmp/res.agent.warm"
if [ -n "$VS" ]; then
	echo "warming the symbol cache of the agent at $VS (20 s)" >&2
	agent_run warm 20 vs
	rm -f "$tmp/res.vs.warm"
fi

# Rounds take turns (agent first in odd rounds, perf first in even ones), so
# a change of the machine's load meets both.
for n in $(seq 1 "$ROUNDS"); do
	if [ $((n % 2)) = 1 ]; then
		agent_run "$n"
		[ -z "$VS" ] || agent_run "$n" "$SECS" vs
		perf_run "$n"
	else
		perf_run "$n"
		agent_run "$n"
		[ -z "$VS" ] || agent_run "$n" "$SECS" vs
	fi
	vsline=
	[ -z "$VS" ] || vsline=", agent at $VS $(cut -d" " -f1 "$tmp/res.vs.$n") s CPU"
	echo "round $n of $ROUNDS: agent $(cut -d" " -f1 "$tmp/res.agent.$n") s CPU$vsline, perf $(cut -d" " -f1 "$tmp/res.perf.$n") s CPU" >&2
done

# summary NAME PREFIX: the median and range over the rounds of each field.
summary() {
	cat "$tmp/res.$2".[0-9]* | awk -v n="$1" -v secs="$SECS" '
		{ cpu[NR] = $1; rss[NR] = $2 / 1024; smp[NR] = $3; bps[NR] = $3 ? $4 / $3 : 0; per[NR] = $3 ? 1e6 * $1 / $3 : 0; st[NR] = $5; ld[NR] = $6 }
		function med(a, k, i, j, t, b) { for (i = 1; i <= k; i++) b[i] = a[i]; for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (b[j] < b[i]) { t = b[i]; b[i] = b[j]; b[j] = t }; return k % 2 ? b[(k + 1) / 2] : (b[k / 2] + b[k / 2 + 1]) / 2 }
		function lo(a, k, i, m) { m = a[1]; for (i = 2; i <= k; i++) if (a[i] < m) m = a[i]; return m }
		function hi(a, k, i, m) { m = a[1]; for (i = 2; i <= k; i++) if (a[i] > m) m = a[i]; return m }
		END {
			k = NR
			printf "%-22s %6.2f %% (%.2f..%.2f) %7.1f us %7.1f MiB %8d %8.1f %9s %6.1f\n", n,
				100 * med(cpu, k) / secs, 100 * lo(cpu, k) / secs, 100 * hi(cpu, k) / secs, med(per, k), med(rss, k), med(smp, k), med(bps, k),
				med(st, k) ? sprintf("%.1f us", med(st, k)) : "-", med(ld, k)
		}'
}
echo "$SECS s a run, $ROUNDS rounds taking turns, at $HZ Hz per CPU on $(nproc) CPUs, cpuburn keeping them busy, the agent's symbol cache warm (medians; CPU's range over the rounds)"
printf "%-22s %24s %10s %11s %8s %8s %9s %6s\n" "" "CPU of 1 CPU" "per sample" "max RSS" "samples" "B/sample" "steady" "load"
summary "pitraced continuous" agent
[ -z "$VS" ] || summary "pitraced at ${VS:0:10}" vs
summary "perf record -a -g" perf
echo "(agent: bytes per sample are OTLP/HTTP request bodies; steady: its CPU per sample after the first interval, when the symbol tables of the running programs are loaded; perf: bytes of perf.data, names not resolved; load: the 1-minute load average at each run's start)"
