#!/bin/bash
# Sampling profilers on a real Java program, side by side in one run: javac
# compiling NFILES generated classes (the classes of bench/jprof-trace.sh),
#   plain      no profiler
#   perfinsp   run.tprof -g at 1 kHz with -agentpath:libjprof.so=tprof (JIT
#              code named by the agent's records, interpreted frames by its
#              Java stack samples; native and kernel frames from the tick's
#              own stack)
#   JFR        -XX:StartFlightRecording, settings=profile (the JDK's own
#              sampler: Java frames of Java threads, every 10-20 ms)
# For each: the JVM's wall time (median of RUNS, min..max), its slowdown
# against plain, the samples of the JVM, and the share of their frames that
# carry a name (a method or symbol; not Interpreter, an address or unknown).
#
#   bench/java-sampling.sh [NFILES=300] [RUNS=3]
set -euo pipefail
cd "$(dirname "$0")/.."
NFILES=${1:-300}
RUNS=${2:-3}
command -v java >/dev/null || { echo "bench: java is not installed (apt-get install openjdk-17-jdk-headless; scripts/deps/jprof.txt)" >&2; exit 1; }
command -v jfr >/dev/null || { echo "bench: jfr is not installed (the JDK's bin/jfr; openjdk-17-jdk-headless)" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "bench: run.tprof samples system-wide: run as root" >&2; exit 1; }
make -s jprof >/dev/null
go build -o bin/ ./tools/swtrace ./tools/post ./daemon/cmd/pitraced
tmp=$(mktemp -d)
export PERFINSP_SOCKET=$tmp/pitraced.sock PERFINSP_BACKEND=daemon PERFINSP_PITRACED=$PWD/bin/pitraced
stop() {
	bin/swtrace free >/dev/null 2>&1 || true
	for p in $(sed -n 's/.*(pid \([0-9]*\)).*/\1/p' "$tmp/pitraced.log" 2>/dev/null); do
		kill -INT "$p" 2>/dev/null || true
	done
	rm -rf "$tmp"
}
trap stop EXIT
cp bin/libjprof.so "$tmp/libjprof.so" # a rebuild meanwhile does not touch the runs

mkdir -p "$tmp/src/gen"
for i in $(seq 0 $((NFILES - 1))); do
	n=$(((i + 1) % NFILES))
	cat >"$tmp/src/gen/C$i.java" <<EOF
package gen;
import java.util.*;
public class C$i {
    private final Map<String, List<Integer>> index = new HashMap<>();
    public static int work(int n) {
        int s = 0;
        for (int k = 0; k < n; k++) { s += k % 7 == 0 ? k : -k; if (s > 1000) s -= 999; }
        return s + C$n.helper(n);
    }
    static int helper(int n) { return n * 31 + $i; }
    public String kind(String s) {
        switch (s) {
        case "alpha": return "a";
        case "beta": return "b";
        default: return s.toUpperCase(Locale.ROOT);
        }
    }
    public List<String> names(List<? extends CharSequence> in) {
        List<String> out = new ArrayList<>();
        for (CharSequence c : in) out.add(c.toString().trim());
        out.sort(Comparator.comparing(String::length));
        return out;
    }
    public void put(String k, int v) { index.computeIfAbsent(k, x -> new ArrayList<>()).add(v); }
}
EOF
done
ls "$tmp"/src/gen/*.java >"$tmp/files"
JAVAC=(-m jdk.compiler/com.sun.tools.javac.Main -d "$tmp/classes" @"$tmp/files")

# run NAME cmd...: one run; its wall time (ms) appended to $tmp/NAME.
run() {
	local name=$1 s e
	shift
	rm -rf "$tmp/classes" "$tmp/p"
	mkdir -p "$tmp/classes" "$tmp/p"
	s=$(date +%s%N)
	"$@" >"$tmp/out" 2>&1 || { echo "bench: $name failed:" >&2; tail -20 "$tmp/out" >&2; exit 1; }
	e=$(date +%s%N)
	echo $(((e - s) / 1000000)) >>"$tmp/$name"
}
# named FOLDED: "samples named_frames frames" of a folded-stack file.
named() {
	awk '{
		n = $NF; sub(/ [0-9]+$/, "")
		k = split($0, f, ";")
		s += n
		for (i = 1; i <= k; i++) {
			fr = f[i]; t += n
			if (fr !~ /^(Interpreter|\[unknown\]|<unknown>|unknown)$/ && fr !~ /^(0x)?[0-9a-f]+$/ && fr !~ /\+0x[0-9a-f]+/) ok += n
		}
	} END { printf "%d %d %d\n", s, ok, t }' "$1"
}
# jfrnamed FILE.jfr: the same from JFR's execution samples (every frame
# JFR records is a Java method with its name).
jfrnamed() {
	jfr print --events jdk.ExecutionSample,jdk.NativeMethodSample "$1" | awk '
		/^jdk\.(ExecutionSample|NativeMethodSample)/ { s++ }
		/line: [0-9]+/ || /\(\)/ { t++; if ($0 !~ /unknown/) ok++ }
		END { printf "%d %d %d\n", s, ok, t }'
}
for r in $(seq "$RUNS"); do
	run plain java "${JAVAC[@]}"
	run perfinsp scripts/run.tprof -r 1000 -g -o "$tmp/p" -- java -agentpath:"$tmp/libjprof.so"=tprof "${JAVAC[@]}"
	[ "$r" = 1 ] && named "$tmp/p/tprof.folded" >"$tmp/perfinsp.names"
	run jfr java -XX:StartFlightRecording=filename="$tmp/r.jfr",settings=profile "${JAVAC[@]}"
	[ "$r" = 1 ] && jfrnamed "$tmp/r.jfr" >"$tmp/jfr.names"
	rm -f "$tmp/r.jfr"
done

med() { sort -n "$tmp/$1" | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
lo() { sort -n "$tmp/$1" | head -1; }
hi() { sort -n "$tmp/$1" | tail -1; }
p=$(med plain)
echo "javac, $NFILES generated classes: JVM wall time, median of $RUNS runs (min..max), one run's samples"
printf "  %-44s %7s ms (%s..%s)\n" "plain" "$p" "$(lo plain)" "$(hi plain)"
row() { # name label
	local m s ok t
	m=$(med "$1")
	read -r s ok t <"$tmp/$1.names"
	printf "  %-44s %7s ms (%s..%s)  %+6.1f %%  %6d samples  %5.1f %% of %d frames named\n" "$2" "$m" "$(lo "$1")" "$(hi "$1")" \
		"$(echo "100 * ($m - $p) / ($p + 0.0001)" | bc -l)" "$s" "$(echo "100 * $ok / ($t + 0.0001)" | bc -l)" "$t"
}
row perfinsp "perfinsp run.tprof -g 1 kHz, agent tprof"
row jfr "JFR settings=profile (Java frames only)"
