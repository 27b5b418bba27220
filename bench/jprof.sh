#!/bin/bash
# JProf overhead on a call-heavy Java program (examples/java/CallBench.java:
# fib(24) REPS times, 75,025 calls each):
#   (1) no agent (the JIT compiles fib), and -Xint (the interpreter alone:
#       what calltree mode runs in, as JVMTI method events keep the JVM in
#       the interpreter),
#   (2) calltree mode (method entry/exit of every call on the call-flow
#       runtime, metric task-clock),
#   (3) tprof mode (JIT_LOAD records) under run.tprof, against plain
#       run.tprof of the same program (the target: within the run-to-run
#       noise of plain tprof). Needs root for run.tprof.
# Each figure is the median of RUNS runs with the spread (min..max); the
# time is the program's own measurement of the fib part (elapsed_ms), and
# for (3) also the JVM's whole wall time (start-up included, where the
# agent's records are written).
#
#   bench/jprof.sh [REPS=20] [RUNS=3]
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${1:-20}
RUNS=${2:-3}
command -v java >/dev/null || { echo "bench: java is not installed (apt-get install openjdk-17-jdk-headless; scripts/deps/jprof.txt)"; exit 1; }
make -s jprof hookit >/dev/null
go build -o bin/ ./tools/swtrace ./tools/post ./daemon/cmd/pitraced
tmp=$(mktemp -d)
export PERFINSP_SOCKET=$tmp/pitraced.sock PERFINSP_BACKEND=daemon PERFINSP_PITRACED=$PWD/bin/pitraced
# at the end: free the trace, stop the daemon started on this socket (its
# log names its pid), remove the files
stop() {
	bin/swtrace free >/dev/null 2>&1 || true
	for p in $(sed -n 's/.*(pid \([0-9]*\)).*/\1/p' "$tmp/pitraced.log" 2>/dev/null); do
		kill -INT "$p" 2>/dev/null || true
	done
	rm -rf "$tmp"
}
trap stop EXIT
CP=$PWD/build/java
AGENT=$PWD/bin/libjprof.so

# run NAME cmd...: RUNS runs; each appends "elapsed_ms wall_ms" to $tmp/NAME.
run() {
	local name=$1
	shift
	for _ in $(seq "$RUNS"); do
		rm -rf "$tmp/ct"
		mkdir -p "$tmp/ct"
		"$@" >"$tmp/out" 2>&1 || { cat "$tmp/out"; exit 1; }
		e=$(sed -n 's/.*elapsed_ms \([0-9]*\).*/\1/p' "$tmp/out" | head -1)
		w=$(sed -n 's/^wall_ms \([0-9]*\)/\1/p' "$tmp/out" | head -1)
		echo "$e ${w:-0}" >>"$tmp/$name"
	done
}
# timed CMD: a shell line that runs CMD and prints the JVM's wall time
timed() { echo "s=\$(date +%s%N); $1; e=\$(date +%s%N); echo wall_ms \$(((e - s) / 1000000))"; }
med() { cut -d' ' -f"$2" "$tmp/$1" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
lo() { cut -d' ' -f"$2" "$tmp/$1" | sort -n | head -1; }
hi() { cut -d' ' -f"$2" "$tmp/$1" | sort -n | tail -1; }

run plain java -cp "$CP" CallBench "$REPS"
run xint java -Xint -cp "$CP" CallBench "$REPS"
run calltree java -agentpath:"$AGENT"=calltree,dir="$tmp/ct" -cp "$CP" CallBench "$REPS"
TREPS=$((REPS * 100))
if [ "$(id -u)" = 0 ]; then
	run tprof_plain scripts/run.tprof -o "$tmp" -- bash -c "$(timed "java -cp $CP CallBench $TREPS")"
	run tprof_agent scripts/run.tprof -o "$tmp" -- bash -c "$(timed "java -agentpath:$AGENT=tprof -cp $CP CallBench $TREPS")"
fi

calls=$((REPS * 75025))
p=$(med plain 1)
row() { # name label field
	local m
	m=$(med "$1" "$3")
	printf "%-34s %8s ms  (%s..%s)  %8.1f ns/call  %7.1fx no agent\n" "$2" "$m" "$(lo "$1" "$3")" "$(hi "$1" "$3")" \
		"$(echo "$m * 1000000 / $calls" | bc -l)" "$(echo "$m / ($p + 0.0001)" | bc -l)"
}
echo "JProf overhead: CallBench, fib(24) x $REPS = $calls calls, median of $RUNS runs (min..max)"
row plain "no agent (JIT)" 1
row xint "no agent, -Xint (interpreter)" 1
row calltree "calltree (task-clock)" 1
x=$(med xint 1)
printf "calltree vs -Xint: %.1fx  (PI reported 1.5-10x path length for JProf calltree)\n" "$(echo "$(med calltree 1) / ($x + 0.0001)" | bc -l)"
if [ -f "$tmp/tprof_plain" ]; then
	calls=$((TREPS * 75025))
	echo "tprof mode: fib(24) x $TREPS under run.tprof (1000 Hz), median of $RUNS runs (min..max)"
	for n in tprof_plain tprof_agent; do
		label="run.tprof, no agent"
		[ "$n" = tprof_agent ] && label="run.tprof, agent tprof mode"
		printf "%-30s fib part %6s ms (%s..%s)   JVM wall %6s ms (%s..%s)\n" "$label" "$(med $n 1)" "$(lo $n 1)" "$(hi $n 1)" "$(med $n 2)" "$(lo $n 2)" "$(hi $n 2)"
	done
	printf "tprof-mode overhead: fib part %+.1f %%, JVM wall %+.1f %%\n" \
		"$(echo "100 * ($(med tprof_agent 1) - $(med tprof_plain 1)) / $(med tprof_plain 1)" | bc -l)" \
		"$(echo "100 * ($(med tprof_agent 2) - $(med tprof_plain 2)) / $(med tprof_plain 2)" | bc -l)"
fi
