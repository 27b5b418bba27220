#!/bin/bash
# Cost of recording the scheduler (dispatch, wake-ups and the stacks of
# waits) under a context-switch-heavy load, side by side with perf: the
# load is `perf bench sched pipe -l LOOPS` (two processes passing a token
# through a pair of pipes), run
#   plain          with nothing recording
#   perfinsp       under the daemon backend, system-wide: `swtrace enable
#                  --only dispatch callstack` (DISPATCH from sched_switch,
#                  WAKEUP from sched_wakeup[_new], UNWIND_SWITCH: the stack
#                  of each thread switched out to wait), through a pitraced
#                  of its own (not the system's socket)
#   pi no stk      the same with `enable --only dispatch`: no stacks (what
#                  perf sched record's figures compare with)
#   perf sched     `perf sched record` (sched_switch, sched_waking,
#                  sched_wakeup_new, sched_migrate_task, sched_stat_*)
#   perf -g        `perf record -a -g -e sched:sched_switch` (the stack of
#                  every switch)
# Every recorder runs in a session of its own, as the agent does and as a
# recorder started from another terminal or as a service would: with
# autogroups (the kernel's default where CONFIG_SCHED_AUTOGROUP is set) a
# session is one scheduling entity, and a recorder in the load's session
# shares the load's entity and turns (the load is run from this script's
# session).
# ROUNDS times, the five taking turns (the order turns by one each round),
# in one run: a machine whose other load changes moves all alike.
# Each recorder is on before the load starts and off after it ends (perf
# through --control: started with its events disabled, enabled, the load
# run once perf acknowledges). Printed per configuration (median of the
# rounds; min..max of the slowdown):
#   us/op          the load's own figure (wall time per round trip)
#   cpu us/op      the load's CPU time (user + system of both processes)
#                  per round trip: the kernel's writing of the records is
#                  in it; other load on the machine moves it less than the
#                  wall time
#   slowdown       us/op against the plain run of the same round (the
#                  runs next to it in time), the median of the rounds'
#                  ratios and their min..max
#   load           the machine's load average (1 min) at the start of the
#                  configuration's runs, their median: beside it, a
#                  slowdown says how busy the CPUs were
#   switches       the machine's context switches while the load ran (the
#                  kernel's count, /proc/stat ctxt: the same measure for
#                  every recorder; the other load of the machine is in it,
#                  and in the system-wide traces)
#   in trace       sched_switch records in the trace, counted in it: the
#                  DISPATCH records post -sched reads, perf's sched_switch
#                  samples (fewer than switches: records lost; more: the
#                  switches before and after the load while recording)
#   lost           records the recorder lost, the most of one round
#                  (perfinsp: swtrace info's count, its perf rings'
#                  losses included; perf: its events' LOST_SAMPLES)
#   B/switch       the trace file's bytes per switch
#   rec cpu        the recorder's own CPU time (user + system): pitraced
#                  from `swtrace on` to the end of `swtrace get` (the
#                  process scan at on, the draining, the file), perf from
#                  start to exit (mappings synthesized, draining, build-ids)
#   rec us/sw      that per switch
# With --vs REV the agent (pitraced) of git revision REV is built into the
# temporary directory and recorded with too, through a daemon of its own
# (this tree's swtrace and post): two more rows (with stacks and without),
# taking their turns.
# Run as root.
#
#   bench/offcpu.sh [--vs REV] [LOOPS=200000] [ROUNDS=3]
set -euo pipefail
cd "$(dirname "$0")/.."
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
case ${1:-} in -h | --help) usage; exit 0 ;; esac
VS=
if [ "${1:-}" = --vs ]; then
	[ $# -ge 2 ] || { echo "bench: --vs needs a git revision" >&2; exit 2; }
	VS=$2
	shift 2
fi
LOOPS=${1:-200000}
ROUNDS=${2:-3}
case "$LOOPS$ROUNDS" in *[!0-9]*) usage >&2; exit 2 ;; esac
[ "$LOOPS" -gt 0 ] && [ "$ROUNDS" -gt 0 ] || { echo "bench: LOOPS and ROUNDS must be positive" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "bench: run as root (system-wide tracepoints)" >&2; exit 1; }
command -v perf >/dev/null || { echo "bench: perf is not installed (apt-get install linux-perf; scripts/deps/base.txt)" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "bench: /usr/bin/time is not installed (apt-get install time)" >&2; exit 1; }
command -v python3 >/dev/null || { echo "bench: python3 is not installed" >&2; exit 1; }
perf bench sched pipe -l 10 >/dev/null 2>&1 || { echo "bench: perf bench sched pipe does not run here" >&2; exit 1; }
make -s build >/dev/null
SW=$PWD/bin/swtrace
POST=$PWD/bin/post
tmp=$(mktemp -d)
mkdir -p "$tmp/home/.cache" "$tmp/run" "$tmp/run-vs"
chmod 700 "$tmp/run" "$tmp/run-vs"
# Daemons of their own (not the system's socket), their state in tmp.
export HOME=$tmp/home XDG_CACHE_HOME=$tmp/home/.cache PERFINSP_BACKEND=daemon
# sw RUN-DIR AGENT ARGS...: swtrace with the daemon of RUN-DIR, AGENT the
# pitraced it starts.
sw() { PERFINSP_SOCKET=$1/pitraced.sock PERFINSP_PITRACED=$2 "$SW" "${@:3}"; }
recpid=
cleanup() {
	[ -z "$recpid" ] || kill -INT "$recpid" 2>/dev/null || true
	local d pid
	for d in run run-vs; do
		sw "$tmp/$d" /nonexistent free >/dev/null 2>&1 || true
		for pid in $(sed -n 's/.*(pid \([0-9]*\)).*/\1/p' "$tmp/$d/pitraced.log" 2>/dev/null); do
			kill -INT "$pid" 2>/dev/null || true
		done
	done
	rm -rf "$tmp"
}
trap cleanup EXIT

# load NAME: one run of the load, its figures appended to NAME's list:
# wall us/op, CPU us/op, and the load average as it started.
load() {
	local la
	la=$(cut -d' ' -f1 /proc/loadavg)
	# (its CPU time to the microsecond: /usr/bin/time prints hundredths)
	python3 -c '
import os, sys
pid = os.fork()
if pid == 0:
    fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 1); os.dup2(fd, 2)
    os.execvp(sys.argv[2], sys.argv[2:])
ru = os.wait4(pid, 0)[2]
print(ru.ru_utime, ru.ru_stime)' "$tmp/load.out" perf bench sched pipe -l "$LOOPS" >"$tmp/load.time"
	local us cpu
	us=$(awk '/usecs\/op/ {print $1}' "$tmp/load.out")
	cpu=$(awk -v n="$LOOPS" '{print ($1 + $2) * 1e6 / n}' "$tmp/load.time")
	[ -n "$us" ] || { echo "bench: perf bench gave no usecs/op:" >&2; cat "$tmp/load.out" >&2; exit 1; }
	echo "$us $cpu $la" >>"$tmp/$1.load"
}

# cpu_ticks PID: a process's user + system time in clock ticks.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)
# ctxt: the context switches of every CPU since boot (/proc/stat), read
# just after the recorder is on and just before it goes off: the switches
# during the load, the whole machine's (what a system-wide trace holds).
ctxt() { awk '/^ctxt / {print $2}' /proc/stat; }

# start_daemon RUN-DIR AGENT: the daemon, started by a first swtrace
# command; its pid from its log.
start_daemon() {
	sw "$1" "$2" free >/dev/null 2>&1 || true
	local pid
	pid=$(sed -n 's/.*(pid \([0-9]*\)).*/\1/p' "$1/pitraced.log" 2>/dev/null | tail -1)
	[ -n "$pid" ] || { echo "bench: no pitraced started (see $1/pitraced.log)" >&2; exit 1; }
	echo "$pid"
}
cp bin/pitraced "$tmp/pitraced" # a copy: a rebuild meanwhile does not touch the runs
daemon=$(start_daemon "$tmp/run" "$tmp/pitraced")
configs=(plain perfinsp perfinsp_d perfsched perfg)
if [ -n "$VS" ]; then
	mkdir -p "$tmp/vs"
	git archive "$VS" | tar -x -C "$tmp/vs"
	(cd "$tmp/vs" && go build -tags urfave_cli_no_docs -o "$tmp/pitraced-vs" ./daemon/cmd/pitraced)
	vsdaemon=$(start_daemon "$tmp/run-vs" "$tmp/pitraced-vs")
	configs+=(perfinsp_vs perfinsp_vs_d)
fi

run_plain() { load plain; }
run_perfinsp() { perfinsp_with perfinsp "$tmp/run" "$tmp/pitraced" "$daemon" dispatch callstack; }
run_perfinsp_d() { perfinsp_with perfinsp_d "$tmp/run" "$tmp/pitraced" "$daemon" dispatch; }
run_perfinsp_vs() { perfinsp_with perfinsp_vs "$tmp/run-vs" "$tmp/pitraced-vs" "$vsdaemon" dispatch callstack; }
run_perfinsp_vs_d() { perfinsp_with perfinsp_vs_d "$tmp/run-vs" "$tmp/pitraced-vs" "$vsdaemon" dispatch; }

# perfinsp_with NAME RUN-DIR AGENT PID RECORDS...: the load recorded by the
# daemon of RUN-DIR (pid PID), swtrace enable --only RECORDS.
perfinsp_with() {
	local name=$1 run=$2 agent=$3 daemon=$4
	shift 4
	sw "$run" "$agent" mode normal >/dev/null
	sw "$run" "$agent" init -t 512M -m 4M >/dev/null
	sw "$run" "$agent" enable --only "$@" >/dev/null
	local c0 c1
	c0=$(cpu_ticks "$daemon")
	sw "$run" "$agent" on --discard >/dev/null
	local x0 x1
	x0=$(ctxt)
	load "$name"
	x1=$(ctxt)
	sw "$run" "$agent" off >"$tmp/off.out" 2>&1 || true
	sw "$run" "$agent" get "$tmp/t.nrm2" >/dev/null
	c1=$(cpu_ticks "$daemon")
	local lost switches
	lost=$(sw "$run" "$agent" info --json | python3 -c 'import json,sys; d=json.load(sys.stdin); print(sum(c["lost"]+c["mte_lost"] for c in d["cpus"]))')
	sw "$run" "$agent" free >/dev/null
	# post -sched counts the DISPATCH records it read.
	switches=$("$POST" -r "$tmp/t.nrm2" -sched -o "$tmp/post" 2>"$tmp/post.err" | sed -n 's/.*wrote .*sched.json ([0-9]* threads, \([0-9]*\) dispatches.*/\1/p')
	[ -n "$switches" ] || { echo "bench: post -sched counted no dispatches:" >&2; cat "$tmp/post.err" >&2; exit 1; }
	echo "$switches $lost $(stat -c %s "$tmp/t.nrm2") $(( c1 - c0 )) $(( x1 - x0 ))" >>"$tmp/$name.rec"
	rm -f "$tmp/t.nrm2"
}

# perf_with NAME PERF-SUBCOMMAND...: the load under perf, perf's events
# enabled through its control fifo before the load and disabled after it.
perf_with() {
	local name=$1
	shift
	rm -f "$tmp/ctl" "$tmp/ack" "$tmp/p.data" "$tmp/perf.pid"
	mkfifo "$tmp/ctl" "$tmp/ack"
	exec 8<>"$tmp/ctl" 9<>"$tmp/ack"
	# (setsid -w: a session of its own, and its time counts perf's)
	/usr/bin/time -f '%U %S' -o "$tmp/perf.time" setsid -w bash -c 'echo $$ >"$0"; exec "$@"' "$tmp/perf.pid" \
		perf "$@" -q -D -1 --control fd:8,9 -o "$tmp/p.data" >"$tmp/perf.out" 2>&1 &
	recpid=$!
	echo enable >&8
	local a
	read -r -t 60 a <&9 || { echo "bench: perf $1 did not start:" >&2; cat "$tmp/perf.out" >&2; exit 1; }
	local x0 x1
	x0=$(ctxt)
	load "$name"
	x1=$(ctxt)
	echo disable >&8
	read -r -t 60 a <&9 || true
	kill -INT "$(cat "$tmp/perf.pid")"
	wait "$recpid" || true
	recpid=
	exec 8>&- 9>&-
	local stats switches lost
	stats=$(perf report --stats -i "$tmp/p.data" 2>/dev/null)
	switches=$(awk '/^sched:sched_switch stats:/ {s = 1; next} s && /SAMPLE events:/ {print $3; exit}' <<<"$stats")
	# Each event's samples lost (its LOST_SAMPLES line; the aggregated
	# one counts the records that say so, not the samples).
	lost=$(awk '/^[^ ].* stats:$/ {ev = !/^Aggregated/; next} ev && /LOST_SAMPLES events:/ {n += $3} END {print n + 0}' <<<"$stats")
	[ -n "$switches" ] || { echo "bench: no sched_switch samples in perf $1's data" >&2; exit 1; }
	# (/usr/bin/time's last line: a line before it says perf ended by SIGINT)
	echo "$switches $lost $(stat -c %s "$tmp/p.data") $(tail -1 "$tmp/perf.time" | awk -v hz="$hz" '{print int(($1 + $2) * hz + 0.5)}') $(( x1 - x0 ))" >>"$tmp/$name.rec"
	rm -f "$tmp/p.data"
}
run_perfsched() { perf_with perfsched sched record; }
run_perfg() { perf_with perfg record -a -g -e sched:sched_switch; }

for ((i = 0; i < ROUNDS; i++)); do
	n=${#configs[@]}
	for ((j = 0; j < n; j++)); do
		"run_${configs[(i + j) % n]}"
	done
done

median() { sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
col() { awk -v c="$2" '{print $c}' "$tmp/$1"; }
echo "perf bench sched pipe -l $LOOPS, $ROUNDS rounds, median (min..max); $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg) at the end"
printf '%-11s %7s %9s %8s %14s %5s %9s %9s %8s %8s %8s %9s\n' "" "us/op" "cpu us/op" slowdown "(min..max)" load switches "in trace" lost B/switch "rec cpu" "rec us/sw"
for c in "${configs[@]}"; do
	us=$(col "$c.load" 1 | median)
	cpu=$(col "$c.load" 2 | median)
	la=$(col "$c.load" 3 | median)
	if [ "$c" = plain ]; then
		printf '%-11s %7.2f %9.2f %8s %14s %5.1f\n' plain "$us" "$cpu" - - "$la"
		continue
	fi
	# Each round's run against the plain run of the same round.
	paste -d' ' <(col "$c.load" 1) <(col plain.load 1) | awk '{print 100 * ($1 - $2) / $2}' >"$tmp/$c.slow"
	slow=$(median <"$tmp/$c.slow" | awk '{printf "%+.1f%%", $1}')
	range=$(sort -g "$tmp/$c.slow" | awk 'NR == 1 {lo = $1} {hi = $1} END {printf "%+.0f..%+.0f%%", lo, hi}')
	# Each round's switches (the kernel's count), sched_switch records in
	# the trace, lost, bytes per switch, recorder seconds and us per
	# switch: the median of each, the most for lost.
	read -r sw intrace lost bps rs rus < <(
		awk -v hz="$hz" '{print $5, $1, $2, $3 / $5, $4 / hz, 1e6 * $4 / hz / $5}' "$tmp/$c.rec" >"$tmp/$c.per"
		for k in 1 2 3 4 5 6; do
			if [ "$k" = 3 ]; then col "$c.per" "$k" | sort -g | tail -1; else col "$c.per" "$k" | median; fi
		done | xargs)
	name=$c
	case $c in perfsched) name="perf sched" ;; perfg) name="perf -g" ;; perfinsp_d) name="pi no stk" ;; perfinsp_vs) name="pi ${VS:0:7}" ;; perfinsp_vs_d) name="${VS:0:7} nostk" ;; esac
	printf '%-11s %7.2f %9.2f %8s %14s %5.1f %9.0f %9.0f %8.0f %8.1f %6.2f s %9.2f\n' "$name" "$us" "$cpu" "$slow" "($range)" "$la" "$sw" "$intrace" "$lost" "$bps" "$rs" "$rus"
done
