#!/bin/bash
# The tprof agent's own cost, side by side with perf record in one run:
# system-wide sampling (cpu-clock) of a fixed CPU-bound load (bin/cpuburn's
# two threads, running through the whole benchmark), the configurations
# taking turns in each of RUNS rounds:
#   flat   swtrace enable --only tprof            perf record -a -e cpu-clock -F RATE
#   fp     ... tprof callstack (frame pointers)   ... -g
#   dwarf  ... callstack --unwind dwarf (8192 B)  ... --call-graph dwarf,8192
# pitraced is a private daemon (its own socket in the temporary directory,
# PERFINSP_BACKEND=daemon), started afresh for each of its runs, so that
# each run's peak RSS is its own. A run samples for SECS + 1 seconds
# (pitraced: swtrace on ... off, then get; perf: perf record -- sleep).
#   CPU per sample: the recorder's on-CPU time (the sum of its threads'
#     schedstat) over SECS seconds starting 1 s after it started, divided
#     by the samples it took in them (its samples a second, first to last
#     sample, times SECS). perf decodes its samples (and unwinds DWARF
#     stacks) later, at perf report; pitraced, in normal mode, holds flat
#     and frame-pointer samples undecoded and decodes them at swtrace off,
#     and unwinds DWARF stacks as it records. Below it, the whole run's
#     CPU per sample (pitraced's decoding included):
#     pitraced's /proc/PID/stat from before `swtrace init` to after
#     `swtrace get` (samples: post's Total Ticks), perf record's whole life
#     (/usr/bin/time; samples: its "(N samples)" line).
#   peak RSS: pitraced's VmHWM after get (buffers: swtrace init -t TBUF,
#     default 32M, MTE 1M per CPU); perf record's maximum RSS.
#   after free: pitraced's VmRSS a second after `swtrace free`.
# Then the continuous row: swtrace mode cont with the default buffers,
# tprof at 20 kHz (or the kernel's maximum) + dispatch, for SECS seconds,
# with EXTRA more cpuburn processes running (load about 2 + 2 * EXTRA),
# beside perf record -a -F 20000 -e cpu-clock -e sched:sched_switch: the
# records each lost (pitraced: swtrace info's lost and MTE-lost; perf: the
# sum of its PERF_RECORD_LOST and LOST_SAMPLES counts). Last, with the load
# stopped, the drain capacity (daemon/facility BenchmarkContDrain, as in
# bench/tprof-overhead.sh). Each figure is the median over the rounds; the
# load average is printed. Run as root.
#
#   bench/tprof-agent.sh [SECS=4] [RUNS=3] [RATE=10000] [EXTRA=2]
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-4}
RUNS=${2:-3}
RATE=${3:-10000}
EXTRA=${4:-2}
TBUF=${TBUF:-32M}
[ "$(id -u)" = 0 ] || { echo "bench: run as root (system-wide sampling)"; exit 1; }
command -v perf >/dev/null || { echo "bench: perf is not installed (apt-get install linux-perf; scripts/deps/base.txt)"; exit 1; }
[ -x /usr/bin/time ] || { echo "bench: /usr/bin/time is not installed (apt-get install time)"; exit 1; }
make -s build >/dev/null
tmp=$(mktemp -d)
cp bin/pitraced "$tmp/pitraced" # a copy: a rebuild meanwhile does not touch the runs
export PERFINSP_SOCKET=$tmp/pitraced.sock PERFINSP_BACKEND=daemon PERFINSP_PITRACED=$tmp/pitraced
SW=bin/swtrace
burn=()
dpid() { [ -f "$tmp/pitraced.log" ] && sed -n 's/.*listening on .*(pid \([0-9]*\)).*/\1/p' "$tmp/pitraced.log" | tail -1; return 0; }
# stopdaemon: the private pitraced, if it runs, freed and stopped (a
# swtrace command with none running would start one).
stopdaemon() {
	local p
	p=$(dpid)
	[ -n "$p" ] && kill -0 "$p" 2>/dev/null || return 0
	$SW free >/dev/null 2>&1 || true
	kill -INT "$p" 2>/dev/null || return 0
	while kill -0 "$p" 2>/dev/null; do sleep 0.05; done
}
cleanup() {
	for p in "${burn[@]}"; do kill "$p" 2>/dev/null || true; done
	stopdaemon
	rm -rf "$tmp"
}
trap cleanup EXIT
hz=$(getconf CLK_TCK)
dcpu() { awk -v hz="$hz" '{sub(/.*\) /, ""); printf "%.3f\n", ($12 + $13) / hz}' "/proc/$1/stat"; }
# runns PID: the on-CPU time of all PID's threads in ns (schedstat)
runns() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{n += $1} END {printf "%.0f\n", n}'; }
now() { date +%s%N; }
status() { awk -v k="$2:" '$1 == k {print $2}' "/proc/$1/status"; } # kB

# The load: cpuburn's two threads, long enough for every run.
total=$((RUNS * 6 * (SECS + 6) + 60))
bin/cpuburn $((total * 100)) >/dev/null &
burn+=($!)
sleep 1

# agent CFG N: one run of pitraced; "cpu_s samples hwm_kb free_kb win_s win_samples" to $tmp/agent.CFG.N
agent() {
	local cfg=$1 n=$2 p c0 c1 w0 w1 s0 s1 hwm ticks dur freed
	stopdaemon
	$SW mode normal >/dev/null
	p=$(dpid)
	c0=$(dcpu "$p")
	$SW init -t "$TBUF" -m 1M >/dev/null
	case $cfg in
	flat) $SW enable --only tprof >/dev/null ;;
	fp) $SW enable --only tprof callstack >/dev/null ;;
	dwarf) $SW enable --only --unwind dwarf tprof callstack >/dev/null ;;
	esac
	$SW setrate "$RATE" >/dev/null
	$SW on >/dev/null
	sleep 1
	w0=$(runns "$p")
	s0=$(now)
	sleep "$SECS"
	w1=$(runns "$p")
	s1=$(now)
	$SW off >"$tmp/off.$cfg" 2>&1
	$SW get "$tmp/t.nrm2" >/dev/null
	c1=$(dcpu "$p")
	hwm=$(status "$p" VmHWM)
	$SW info >"$tmp/info.$cfg.$n"
	$SW free >/dev/null
	sleep 1
	freed=$(status "$p" VmRSS)
	mkdir -p "$tmp/post"
	bin/post -r "$tmp/t.nrm2" -tprof -o "$tmp/post" >/dev/null 2>&1 || true
	ticks=$(sed -n 's/^ *Total Ticks *: *\([0-9]*\).*/\1/p' "$tmp/post/tprof.out")
	dur=$(sed -n 's/^ *Duration *: *\([0-9.]*\) s.*/\1/p' "$tmp/post/tprof.out")
	rm -f "$tmp/post/tprof.out"
	awk -v a="$c0" -v b="$c1" -v t="$ticks" -v h="$hwm" -v f="$freed" -v w0="$w0" -v w1="$w1" -v s0="$s0" -v s1="$s1" -v d="$dur" \
		'BEGIN {printf "%.3f %d %d %d %.6f %.0f\n", b - a, t, h, f, (w1 - w0) / 1e9, t * (s1 - s0) / 1e9 / d}' >"$tmp/agent.$cfg.$n"
}

# perfrun CFG N: one run of perf record; "cpu_s samples maxrss_kb win_s win_samples" to $tmp/perf.CFG.N
perfrun() {
	local cfg=$1 n=$2 args=() tp p w0 w1 s0 s1 s first last
	case $cfg in
	fp) args=(-g) ;;
	dwarf) args=(--call-graph dwarf,8192) ;;
	esac
	/usr/bin/time -o "$tmp/time" -f "%U %S %M" perf record -a -e cpu-clock -F "$RATE" "${args[@]}" -o "$tmp/perf.data" -- sleep $((SECS + 2)) 2>"$tmp/perf.err" >/dev/null &
	tp=$!
	sleep 1
	p=$(pgrep -P "$tp" -x perf)
	w0=$(runns "$p")
	s0=$(now)
	sleep "$SECS"
	w1=$(runns "$p")
	s1=$(now)
	wait "$tp"
	s=$(sed -n 's/.*(\([0-9]*\) samples).*/\1/p' "$tmp/perf.err" | tail -1)
	first=$(perf report --header-only -i "$tmp/perf.data" 2>/dev/null | sed -n 's/^# time of first sample : *\([0-9.]*\).*/\1/p')
	last=$(perf report --header-only -i "$tmp/perf.data" 2>/dev/null | sed -n 's/^# time of last sample : *\([0-9.]*\).*/\1/p')
	awk -v s="$s" -v w0="$w0" -v w1="$w1" -v s0="$s0" -v s1="$s1" -v a="$first" -v b="$last" \
		'{printf "%.3f %d %d %.6f %.0f\n", $1 + $2, s, $3, (w1 - w0) / 1e9, s * (s1 - s0) / 1e9 / (b - a)}' "$tmp/time" >"$tmp/perf.$cfg.$n"
}

# perflost FILE: PERF_RECORD_LOST and LOST_SAMPLES counts summed.
perflost() {
	perf report -D -i "$1" 2>/dev/null | awk '
		/PERF_RECORD_LOST_SAMPLES/ {for (i = 1; i <= NF; i++) if ($i == "lost") {n += $(i+1)}; next}
		/PERF_RECORD_LOST / {for (i = 1; i <= NF; i++) if ($i == "lost") {n += $(i+1)}}
		END {print n + 0}'
}

maxrate=$(cat /proc/sys/kernel/perf_event_max_sample_rate 2>/dev/null || echo 20000)
crate=$((maxrate < 20000 ? maxrate : 20000))
# contagent N / contperf N: "records lost" to $tmp/cont.{agent,perf}.N
contagent() {
	stopdaemon
	$SW mode cont -f "$tmp/cont.nrm2" >/dev/null
	$SW init >/dev/null # the default buffers
	$SW enable --only tprof dispatch >/dev/null
	$SW setrate "$crate" >/dev/null
	$SW on >/dev/null
	sleep "$SECS"
	$SW off >/dev/null
	$SW info --json >"$tmp/cinfo.json"
	$SW mode normal >/dev/null
	python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); c=d["cpus"]; print(sum(x["records"]+x["mte_records"] for x in c), sum(x["lost"]+x["mte_lost"] for x in c))' "$tmp/cinfo.json" >"$tmp/cont.agent.$1"
	rm -f "$tmp/cont.nrm2"
}
contperf() {
	perf record -a -e cpu-clock -F "$crate" -e sched:sched_switch -o "$tmp/cperf.data" -- sleep "$SECS" 2>"$tmp/cperf.err" >/dev/null
	local s
	s=$(sed -n 's/.*(\([0-9]*\) samples).*/\1/p' "$tmp/cperf.err" | tail -1)
	echo "$s $(perflost "$tmp/cperf.data")" >"$tmp/cont.perf.$1"
	rm -f "$tmp/cperf.data"
}

load0=$(cut -d' ' -f1-3 /proc/loadavg)
for ((i = 0; i < RUNS; i++)); do
	for cfg in flat fp dwarf; do
		agent $cfg $i
		perfrun $cfg $i
	done
	rm -f "$tmp/perf.data" "$tmp/t.nrm2"
done
# The continuous row under more load.
extra=()
for ((j = 0; j < EXTRA; j++)); do
	bin/cpuburn $(((RUNS * 2 * (SECS + 3) + 30) * 100)) >/dev/null &
	extra+=($!)
	burn+=($!)
done
sleep 2
loadc=$(cut -d' ' -f1-3 /proc/loadavg)
for ((i = 0; i < RUNS; i++)); do
	contagent $i
	contperf $i
done
loadc1=$(cut -d' ' -f1-3 /proc/loadavg)
for p in "${extra[@]}"; do kill "$p" 2>/dev/null || true; done
stopdaemon
for p in "${burn[@]}"; do kill "$p" 2>/dev/null || true; done
burn=()
sleep 2
loadd=$(cut -d' ' -f1-3 /proc/loadavg)
cap=$(go test -run '^$' -bench ContDrain -benchtime 4000000x ./daemon/facility/ | awk '/^BenchmarkContDrain/ {for (i = 1; i <= NF; i++) {if ($(i+1) == "records/s") r = $i; if ($(i+1) == "lost") l = $i}; printf "%.2f M records/s, %d lost", r/1e6, l}')
load1=$(cut -d' ' -f1-3 /proc/loadavg)

# med WHO CFG COL: the median over the runs of column COL.
med() { cat "$tmp/$1.$2".* | awk -v c="$3" '{print $c}' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
# perus WHO CFG CPUCOL SAMPLESCOL: median CPU per sample in µs (per run, then the median).
perus() { cat "$tmp/$1.$2".* | awk -v c="$3" -v n="$4" '$n > 0 {printf "%.3f\n", $c * 1e6 / $n}' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b > 0) printf "%.2f", a / b; else print "-"}'; }
mb() { awk -v k="$1" 'BEGIN {printf "%.1f", k / 1024}'; }

echo "tprof agent against perf record: system-wide, cpu-clock at $RATE Hz, $SECS s per run, median of $RUNS rounds taking turns"
echo "load: bin/cpuburn (2 threads) throughout; $(nproc) CPUs; load average before $load0, after $load1"
printf '%-40s %14s %14s %7s  %s\n' measure pitraced "perf record" ratio goal
for cfg in flat fp dwarf; do
	a=$(perus agent $cfg 5 6)
	p=$(perus perf $cfg 4 5)
	r=$(ratio "$a" "$p")
	ok=$(awk -v r="$r" 'BEGIN {print (r != "-" && r <= 1.5) ? "met" : "missed"}')
	printf '%-40s %11s µs %11s µs %7s  %s\n' "CPU per sample, $cfg" "$a" "$p" "$r" "<= 1.5x perf ($ok)"
done
for cfg in flat fp dwarf; do
	a=$(perus agent $cfg 1 2)
	p=$(perus perf $cfg 1 2)
	printf '%-40s %11s µs %11s µs %7s\n' "  whole run (start, stop, file), $cfg" "$a" "$p" "$(ratio "$a" "$p")"
done
for cfg in flat fp dwarf; do
	printf '%-40s %14s %14s\n' "  samples a run, $cfg" "$(med agent $cfg 2)" "$(med perf $cfg 2)"
done
for cfg in flat fp dwarf; do
	a=$(med agent $cfg 3)
	p=$(med perf $cfg 3)
	r=$(ratio "$a" "$p")
	ok=$(awk -v a="$a" -v p="$p" 'BEGIN {print (a <= p) ? "met" : "missed"}')
	printf '%-40s %11s MB %11s MB %7s  %s\n' "peak RSS, $cfg" "$(mb "$a")" "$(mb "$p")" "$r" "<= perf's peak ($ok)"
done
for cfg in flat fp dwarf; do
	a=$(med agent $cfg 4)
	printf '%-40s %11s MB %14s %7s  %s\n' "RSS 1 s after swtrace free, $cfg" "$(mb "$a")" "-" "-" "memory returned"
done
ar=$(med cont agent 1)
al=$(med cont agent 2)
pr=$(med cont perf 1)
pl=$(med cont perf 2)
ok=$(awk -v l="$al" 'BEGIN {print (l == 0) ? "met" : "missed"}')
printf '%-40s %14s %14s %7s  %s\n' "cont $crate Hz + dispatch: lost" "$al" "$pl" "-" "0 lost, default buffers ($ok)"
printf '%-40s %14s %14s\n' "  records (perf: samples)" "$ar" "$pr"
echo "  (continuous rows: $EXTRA more cpuburn processes, load average $loadc at their start, $loadc1 at their end;"
echo "   each round's records lost: pitraced $(cat "$tmp"/cont.agent.* | awk '{printf "%s ", $2}')/ perf $(cat "$tmp"/cont.perf.* | awk '{printf "%s ", $2}'))"
echo "drain capacity (BenchmarkContDrain, two producer CPUs, the load stopped, load average $loadd): $cap"
echo "DWARF unwinding, last run: $(sed -n 's/^swtrace: call stacks: //p' "$tmp/off.dwarf")"
