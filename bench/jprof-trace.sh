#!/bin/bash
# The JVM's run time under JProf's method-event modes, side by side in one run:
#   plain         no agent
#   null agent    an agent with empty MethodEntry / MethodExit callbacks
#                 (bench/nullagent.c): the JVM's own event posting, the
#                 floor of any entry/exit profiler
#   calltree      -agentpath:libjprof.so=calltree (the call-flow runtime)
#   calltree,trace  the same, every entry/exit and method name also into
#                 the trace (tracing on through a private pitraced, cont
#                 mode to a file in the temporary directory)
#   JFR           -XX:StartFlightRecording (the JDK's own sampling profiler)
# on two programs: the bundled JProfDemo, and javac compiling NFILES
# generated classes (a real compiler run: parsing, attribution, code
# generation). With --vs REV the agent and pitraced of git revision REV are
# built into the temporary directory and its calltree / calltree,trace rows
# (REV's agent against REV's pitraced) are printed beside this tree's.
# The runs are interleaved: each of RUNS rounds runs every configuration
# once. Each row gives the median of the JVM's CPU time (user + system,
# min..max), its wall time, and for the traced rows pitraced's CPU time
# over the run (the records' cost moved out of the JVM); the ratio
# calltree,trace / calltree is of the CPU times, the JVM's and the JVM's
# plus pitraced's. The load average is printed before and after.
# CONFIGS (environment) picks the configurations, default
# "plain null jfr calltree trace"; PROGS the programs, default "demo javac".
#
#   bench/jprof-trace.sh [--vs REV] [NFILES=300] [RUNS=3]
set -euo pipefail
cd "$(dirname "$0")/.."
VS=
if [ "${1:-}" = --vs ]; then
	VS=$2
	shift 2
fi
NFILES=${1:-300}
RUNS=${2:-3}
command -v java >/dev/null || { echo "bench: java is not installed (apt-get install openjdk-17-jdk-headless; scripts/deps/jprof.txt)" >&2; exit 1; }
make -s jprof hookit >/dev/null
go build -o bin/ ./tools/swtrace ./tools/post ./daemon/cmd/pitraced
tmp=$(mktemp -d)
cp bin/pitraced "$tmp/pitraced"	# a copy: a rebuild meanwhile does not touch the runs
export PERFINSP_SOCKET=$tmp/pitraced.sock PERFINSP_BACKEND=daemon PERFINSP_PITRACED=$tmp/pitraced
stop() {
	bin/swtrace free >/dev/null 2>&1 || true
	for p in $(sed -n 's/.*(pid \([0-9]*\)).*/\1/p' "$tmp/pitraced.log" 2>/dev/null); do
		kill -INT "$p" 2>/dev/null || true
	done
	rm -rf "$tmp"
}
trap stop EXIT
JH=$(dirname "$(dirname "$(readlink -f "$(command -v javac)")")")
CFLAGS="-O2 -fPIC -I$JH/include -I$JH/include/linux"
cc $CFLAGS -shared -o "$tmp/nullagent.so" bench/nullagent.c
cp bin/libjprof.so "$tmp/libjprof.so"	# a copy: a rebuild meanwhile does not touch the runs
AGENT=$tmp/libjprof.so
if [ -n "$VS" ]; then
	mkdir -p "$tmp/old"
	git archive "$VS" tools/jprof/agent libperfutil/c kmod/uapi | tar -x -C "$tmp/old"
	(cd "$tmp/old" && cc $CFLAGS -Ilibperfutil/c/include -Ilibperfutil/c -Ilibperfutil/c/hookit -shared -pthread \
		-fvisibility=hidden -Wl,--exclude-libs,ALL -o libjprof.so tools/jprof/agent/*.c libperfutil/c/agentconn.c "$OLDPWD/bin/libhookit.a")
	OLD=$tmp/old/libjprof.so
	mkdir -p "$tmp/oldsrc"
	git archive "$VS" | tar -x -C "$tmp/oldsrc"
	(cd "$tmp/oldsrc" && go build -o "$tmp/old/pitraced" ./daemon/cmd/pitraced)
fi

# NFILES classes, each with fields, generic collections, loops, string
# switches, lambdas and calls into its neighbours.
mkdir -p "$tmp/src/gen" "$tmp/classes"
for i in $(seq 0 $((NFILES - 1))); do
	n=$(((i + 1) % NFILES))
	cat >"$tmp/src/gen/C$i.java" <<EOF
package gen;
import java.util.*;
import java.util.function.*;
public class C$i implements Comparable<C$i> {
    private final int id;
    private final Map<String, List<Integer>> index = new HashMap<>();
    public C$i(int id) { this.id = id; }
    public int compareTo(C$i o) { return Integer.compare(id, o.id); }
    public static int work(int n) {
        int s = 0;
        for (int k = 0; k < n; k++) { s += k % 7 == 0 ? k : -k; if (s > 1000) s -= 999; }
        return s + C$n.helper(n);
    }
    static int helper(int n) { return n * 31 + $i; }
    public String kind(String s) {
        switch (s) {
        case "alpha": return "a" + id;
        case "beta": return "b" + id;
        case "gamma": return "c" + id;
        default: return s.toUpperCase(Locale.ROOT);
        }
    }
    public List<String> names(List<? extends CharSequence> in) {
        List<String> out = new ArrayList<>();
        for (CharSequence c : in) out.add(c.toString().trim());
        out.sort(Comparator.comparing(String::length).thenComparing(Function.identity()));
        return out;
    }
    public Optional<Integer> first(String key) {
        return Optional.ofNullable(index.get(key)).flatMap(l -> l.stream().filter(x -> x > id).findFirst());
    }
    public <T extends Comparable<T>> T max(Collection<T> c) {
        T best = null;
        for (T t : c) if (best == null || t.compareTo(best) > 0) best = t;
        return best;
    }
    public void put(String k, int v) { index.computeIfAbsent(k, x -> new ArrayList<>()).add(v); }
}
EOF
done
ls "$tmp"/src/gen/*.java >"$tmp/files"

# run NAME cmd...: one run; its wall, CPU (user + system) and pitraced's
# CPU (ms) appended to $tmp/NAME.{wall,cpu,dcpu}.
dpid() { sed -n 's/.*(pid \([0-9]*\)).*/\1/p' "$tmp/pitraced.log" 2>/dev/null | tail -1; }
dcpu() { # pitraced's user + system time in ms (0 when it is not running)
	local p
	p=$(dpid)
	if [ -n "$p" ] && [ -r "/proc/$p/stat" ]; then
		awk -v hz="$(getconf CLK_TCK)" '{sub(/.*\) /, ""); print int(($12 + $13) * 1000 / hz)}' "/proc/$p/stat"
	else
		echo 0
	fi
}
run() {
	local name=$1 s e d0 d1
	shift
	rm -rf "$tmp/ct" "$tmp/classes"
	mkdir -p "$tmp/ct" "$tmp/classes"
	d0=$(dcpu)
	s=$(date +%s%N)
	/usr/bin/time -f "%U %S" -o "$tmp/time" "$@" >"$tmp/out" 2>&1 || { echo "bench: $name failed:" >&2; cat "$tmp/out" >&2; exit 1; }
	e=$(date +%s%N)
	d1=$(dcpu)
	echo $(((e - s) / 1000000)) >>"$tmp/$name.wall"
	awk '{print int(($1 + $2) * 1000)}' "$tmp/time" >>"$tmp/$name.cpu"
	echo $((d1 - d0)) >>"$tmp/$name.dcpu"
}
# usedaemon BINARY: the pitraced the next swtrace command starts; the one
# running, if another binary, is stopped first.
usedaemon() {
	local p
	[ "$PERFINSP_PITRACED" != "$1" ] || return 0
	p=$(dpid)
	if [ -n "$p" ] && kill -INT "$p" 2>/dev/null; then
		while kill -0 "$p" 2>/dev/null; do sleep 0.1; done
	fi
	export PERFINSP_PITRACED=$1
}
# traced NAME cmd...: run with tracing on (cont mode to a file in $tmp):
# the records written and lost are kept for the table.
traced() {
	local name=$1
	shift
	bin/swtrace free >/dev/null 2>&1 || true
	bin/swtrace mode cont -f "$tmp/t.nrm2" >/dev/null
	bin/swtrace init -t 32M -m 4M >/dev/null
	bin/swtrace enable --only tprof 0x30 0x50 >/dev/null
	bin/swtrace setrate 1000 >/dev/null
	bin/swtrace on --discard >/dev/null
	run "$name" "$@"
	if ! bin/swtrace off >"$tmp/off" 2>&1; then
		echo "bench: swtrace off failed after $name: $(cat "$tmp/off")" >&2
	fi
	bin/swtrace info --json >"$tmp/$name.info" 2>/dev/null || true
	grep -o 'records written to the trace, [0-9]* not' "$tmp/out" | tail -1 >"$tmp/$name.recs" || true
}
med() { [ -s "$tmp/$1" ] && sort -n "$tmp/$1" | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}' || echo 0; }
lo() { sort -n "$tmp/$1" | head -1; }
hi() { sort -n "$tmp/$1" | tail -1; }

CONFIGS=${CONFIGS:-plain null jfr calltree trace}
PROGS=${PROGS:-demo javac}
has() { case " $CONFIGS " in *" $1 "*) return 0 ;; esac; return 1; }
CP=$PWD/build/java
DEMO=(-Djprofdemo.lib="$PWD/build/java/libjprofdemo.so" -cp "$CP" JProfDemo)
JAVAC=(-m jdk.compiler/com.sun.tools.javac.Main -d "$tmp/classes" @"$tmp/files")
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) CPUs)"
for prog in $PROGS; do
	if [ $prog = demo ]; then args=("${DEMO[@]}"); else args=("${JAVAC[@]}"); fi
	for _ in $(seq "$RUNS"); do
		! has plain || run $prog.plain java "${args[@]}"
		! has null || run $prog.null java -agentpath:"$tmp/nullagent.so" "${args[@]}"
		! has jfr || run $prog.jfr java -XX:StartFlightRecording=filename="$tmp/r.jfr",settings=profile "${args[@]}"
		! has calltree || run $prog.calltree java -agentpath:"$AGENT"=calltree,dir="$tmp/ct" "${args[@]}"
		! has trace || traced $prog.trace java -agentpath:"$AGENT"=calltree,trace,verbose,dir="$tmp/ct" "${args[@]}"
		if [ -n "$VS" ]; then
			usedaemon "$tmp/old/pitraced"
			! has calltree || run $prog.oldcalltree java -agentpath:"$OLD"=calltree,dir="$tmp/ct" "${args[@]}"
			! has trace || traced $prog.oldtrace java -agentpath:"$OLD"=calltree,trace,verbose,dir="$tmp/ct" "${args[@]}"
			usedaemon "$tmp/pitraced"
		fi
	done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

row() { # name label
	local p m
	[ -s "$tmp/$1.cpu" ] || return 0
	p=$(med "${1%%.*}.plain.cpu")
	m=$(med "$1.cpu")
	printf "  %-30s cpu %7s ms (%s..%s)  wall %7s ms  pitraced %6s ms" "$2" "$m" "$(lo "$1.cpu")" "$(hi "$1.cpu")" \
		"$(med "$1.wall")" "$(med "$1.dcpu")"
	if [ "$p" != 0 ]; then printf "  %5.1fx plain" "$(echo "$m / $p" | bc -l)"; fi
	printf "  %s\n" "$(cat "$tmp/$1.recs" 2>/dev/null || true)"
}
ratio() { # trace calltree label
	[ -s "$tmp/$1.cpu" ] && [ -s "$tmp/$2.cpu" ] || return 0
	printf "  calltree,trace / calltree%s: JVM cpu %.2fx, JVM + pitraced cpu %.2fx, wall %.2fx\n" "$3" \
		"$(echo "$(med $1.cpu) / $(med $2.cpu)" | bc -l)" \
		"$(echo "($(med $1.cpu) + $(med $1.dcpu)) / $(med $2.cpu)" | bc -l)" \
		"$(echo "$(med $1.wall) / $(med $2.wall)" | bc -l)"
}
for prog in $PROGS; do
	if [ $prog = demo ]; then echo "JProfDemo: median of $RUNS interleaved runs (min..max)"; else echo "javac, $NFILES generated classes: median of $RUNS interleaved runs (min..max)"; fi
	row $prog.plain "plain"
	row $prog.jfr "JFR (settings=profile)"
	row $prog.null "null entry/exit agent"
	row $prog.calltree "calltree"
	row $prog.trace "calltree,trace"
	ratio $prog.trace $prog.calltree ""
	if [ -n "$VS" ]; then
		row $prog.oldcalltree "calltree ($VS)"
		row $prog.oldtrace "calltree,trace ($VS)"
		ratio $prog.oldtrace $prog.oldcalltree " ($VS)"
	fi
done
