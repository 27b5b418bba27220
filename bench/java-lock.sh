#!/bin/bash
# Java lock contention measured two ways, side by side in one run, on
# WaitDemo (examples/java): main contends N times for a monitor a holder
# thread keeps MS ms each time, and prints the time it waited (measured in
# the program around the synchronized block: the reference).
#   plain     no profiler
#   jprof     -agentpath:libjprof.so=lock (MonitorContendedEnter/Entered;
#             every contended entry, its wait charged to the waiter's stack)
#   JFR       -XX:StartFlightRecording, settings=profile: jdk.JavaMonitorEnter
#             events (recorded when the wait passes the setting's threshold,
#             10 ms in profile), from jfr print --json
# For each workload: the contentions and total wait each profiler reports for
# the waiter's stack (WaitDemo.waitForLock), the program's own figure, and
# each JVM's wall time (median of RUNS).
#
#   bench/java-lock.sh [RUNS=3]
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
for t in java jfr python3 go; do
	command -v $t >/dev/null || { echo "bench: $t is not installed (openjdk-17-jdk-headless: java, jfr; python3; Go)" >&2; exit 1; }
done
make -s jprof >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp bin/libjprof.so "$tmp/libjprof.so" # a rebuild meanwhile does not touch the runs
cp build/java/WaitDemo*.class "$tmp/"

ms_now() { date +%s%N; }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# waited NS from the program's output
prog_ns() { sed -n 's/.*waited \([0-9]*\) ns.*/\1/p' "$1"; }

# jprof: contentions and ns of the stacks ending in WaitDemo.waitForLock
jprof_lock() {
	go tool pprof -raw "$1" 2>/dev/null | python3 -c '
import re, sys
lines = sys.stdin.read().split("\n")
# the locations section names each location id; samples refer to them
names = {}
for l in lines:
    m = re.match(r"^\s+(\d+): 0x0 (?:M=\d+ )?(\S+)", l)
    if m: names[m.group(1)] = m.group(2)
n = ns = 0
for l in lines:
    m = re.match(r"^\s+(\d+)\s+(\d+):((?: \d+)+)\s*$", l)
    if m and names.get(m.group(3).split()[0]) == "WaitDemo.waitForLock":
        n += int(m.group(1)); ns += int(m.group(2))
print(n, ns)'
}

# JFR: jdk.JavaMonitorEnter events whose top frame is WaitDemo.waitForLock
jfr_lock() {
	jfr print --json --events jdk.JavaMonitorEnter "$1" | python3 -c '
import json, re, sys
d = json.load(sys.stdin)
n = ns = 0
for e in d["recording"]["events"]:
    f = e["values"]["stackTrace"]["frames"]
    if not f or f[0]["method"]["name"] != "waitForLock":
        continue
    m = re.match(r"PT(?:(\d+)M)?([\d.]+)S", e["values"]["duration"])
    n += 1; ns += round((int(m.group(1) or 0) * 60 + float(m.group(2))) * 1e9)
print(n, ns)'
}

printf '%-22s %-7s %12s %16s %16s %10s\n' workload tool contentions "wait (ns)" "program (ns)" "JVM (ms)"
for w in "5 200" "200 2"; do
	set -- $w
	for tool in plain jprof JFR; do
		times=()
		for r in $(seq 1 "$RUNS"); do
			d=$tmp/$1x$2-$tool-$r
			mkdir -p "$d"
			case $tool in
			plain) opts=() ;;
			jprof) opts=("-agentpath:$tmp/libjprof.so=lock,dir=$d") ;;
			JFR) opts=("-XX:StartFlightRecording=filename=$d/rec.jfr,settings=profile") ;;
			esac
			t0=$(ms_now)
			java "${opts[@]}" -cp "$tmp" WaitDemo lock "$1" "$2" >"$d/out" 2>"$d/err"
			times+=($((($(ms_now) - t0) / 1000000)))
		done
		d=$tmp/$1x$2-$tool-$RUNS # the last run's figures
		case $tool in
		plain) res="- -" ;;
		jprof) res=$(jprof_lock "$d"/jprof-*.pb.gz) ;;
		JFR) res=$(jfr_lock "$d/rec.jfr") ;;
		esac
		set -- $w $res
		printf '%-22s %-7s %12s %16s %16s %10s\n' "$1 x $2 ms" "$tool" "$3" "$4" "$(prog_ns "$d/out")" \
			"$(printf '%s\n' "${times[@]}" | median)"
		set -- $w
	done
done
