#!/bin/bash
# Runs every benchmark once at its smallest size and checks that it runs to
# its end: exit 0 within its time limit, and the last line of its result
# table printed (a line each benchmark prints at its end, matched by a
# pattern below). The figures at these sizes mean nothing; what is checked
# is that no benchmark hangs, divides by zero at a small size or leaves
# anything behind. `make bench-smoke` (in `make test`); `make bench-smoke-vm`
# runs the ones that boot the kernel-module VM (in make test's VM lane).
#
#   scripts/bench-smoke.sh [--vm] [--list] [NAME...]
#
# NAME picks benchmarks by name (--list prints them); --vm picks the VM
# ones. The full run (no NAME, no --vm) also fails for a script under
# bench/ that no line below runs. Each runs with its own temporary directory as TMPDIR, HOME and
# XDG directories inside it, and PERFINSP_SOCKET there (an agent of its
# own, never the system's); the agents started on that socket are stopped
# after it. A process the benchmark leaves running (any process still
# carrying its BENCH_SMOKE_ID in its environment a few seconds after it
# ended), or a file it leaves in its TMPDIR, fails it; the process is
# stopped. Nothing is left behind: the directory is removed at the end.
#
# A benchmark whose tool (java, uftrace, valgrind, perf, ...) or root is
# missing is skipped, saying what is missing, and reported as skipped, not
# passed; under CI=true (where `make deps` installs everything) it fails.
# Per benchmark: its status, duration and checked line; then a summary.
# The exit code is 1 when any benchmark failed.
#
# Environment: BENCH_SMOKE_TIMEOUT scales every time limit (a factor,
# default 1); BENCH_SMOKE_KEEP=1 keeps the temporary directory (each
# benchmark's output in NAME/out).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

# The benchmarks: name, lane (host, vm), time limit in seconds, what it
# needs (commands as cmd:debian-package, "root"; the VM's own are checked
# by scripts/vmtest/run.sh, which skips or fails the same way), the
# pattern of its end line (ERE), the pattern of a missed goal for a
# benchmark whose exit 1 is its verdict on a goal (hotspot.sh: the 5 %
# slowdown; one short run measures nothing, so its exit 1 with the verdict
# printed is a run to its end), and its command (run from the
# repository's top; DATA is a directory in the temporary one, for the
# scripts that keep their traces in a directory given by -d).
# post-timeline reads post-real's traces (the same DATA): it runs after it.
BENCHES=(
	"callflow|host|180|uftrace:uftrace /usr/bin/time:time|^run\.hookit / uftrace record && report: cpu [0-9.]+, wall [0-9.]+||bench/callflow.sh 1000 1"
	"continuous|host|240|root perf:linux-perf /usr/bin/time:time|^perf record -a -g +[0-9.]+ % \(||bench/continuous.sh 5 97 1"
	"hotspot|host|300|root python3:python3 xz:xz-utils|^  xz: slowdown -?[0-9.]+% \(median of the paired runs\)|above the 5% goal|XZMB=1 bash bench/hotspot.sh 1 100ms"
	"itrace|host|300|root valgrind:valgrind|ns per cached block \(BenchmarkBlockEnd||bench/itrace.sh 100 1"
	"java-lock|host|240|java:openjdk-17-jdk-headless jfr:openjdk-17-jdk-headless python3:python3|^200 x 2 ms +JFR +[0-9]+ ||bench/java-lock.sh 1"
	"java-sampling|host|300|root java:openjdk-17-jdk-headless jfr:openjdk-17-jdk-headless bc:bc|^  JFR settings=profile \(Java frames only\) +[0-9]+ ms||bench/java-sampling.sh 1 1"
	"jprof-trace|host|300|java:openjdk-17-jdk-headless javac:openjdk-17-jdk-headless /usr/bin/time:time bc:bc|^  calltree,trace / calltree: JVM cpu [0-9.]+x||PROGS=demo bash bench/jprof-trace.sh 1 1"
	"jprof|host|240|root java:openjdk-17-jdk-headless bc:bc|^tprof-mode overhead: fib part [-+][0-9.]+ %||bench/jprof.sh 1 1"
	"offcpu|host|240|root perf:linux-perf /usr/bin/time:time python3:python3|^perf -g +[0-9.]+ +[0-9.]+ ||bench/offcpu.sh 1000 1"
	"pprof-lines|host|240|root gcc:gcc|^go +[0-9]+ +post -tprof +[0-9.]+||bench/pprof-lines.sh -d \"\$DATA\" -s 1 -n 1"
	"tprof-overhead|host|240|root perf:linux-perf python3:python3|^  [0-9]+ records/s drained, [0-9]+ lost||bench/tprof-overhead.sh 1000 1 10"
	"tprof-agent|host|240|root perf:linux-perf|^DWARF unwinding, last run: [0-9]+ user stacks||bench/tprof-agent.sh 1 1 1000"
	"post-run|host|240|root perf:linux-perf|^  per sample: post is [0-9.]+x faster than perf report||bench/post/run.sh 10000"
	"post-real|host|300|root perf:linux-perf xz:xz-utils python3:python3 /usr/bin/time:time|^system +stacks +post --folded +[0-9]+||bench/post/real.sh -d \"\$DATA\" -r 1000 -s 1 -n 1 -p 1"
	"post-timeline|host|120|root perf:linux-perf xz:xz-utils python3:python3 /usr/bin/time:time|^system +[0-9]+ +[0-9]+ +[0-9]+||bench/post/timeline.sh -d \"\$DATA\" -n 1"
	"ptt|host|180|gcc:gcc|^  PTT mapped read, daemon backend \(PttReadMetric0\) +[0-9.]+||PTT_BENCH_VM=0 bash bench/ptt/run.sh"
	"kmod-record-cost|vm|1200||^  bench: target <= 0\.50 x perf: ||bench/kmod/record-cost.sh"
)

LANE=host
LIST=
PICK=()
for a in "$@"; do
	case $a in
	--vm) LANE=vm ;;
	--list) LIST=1 ;;
	-h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	-*) echo "bench-smoke: unknown option $a (--help)" >&2; exit 2 ;;
	*) PICK+=("$a") ;;
	esac
done
field() { cut -d'|' -f"$2" <<<"$1"; }
if [ -n "$LIST" ]; then
	for b in "${BENCHES[@]}"; do printf '%-18s %-5s %5s s  %s\n' "$(field "$b" 1)" "$(field "$b" 2)" "$(field "$b" 3)" "$(field "$b" 7-)"; done
	exit 0
fi
sel=()
for b in "${BENCHES[@]}"; do
	n=$(field "$b" 1)
	if [ ${#PICK[@]} -gt 0 ]; then
		for p in "${PICK[@]}"; do [ "$p" = "$n" ] && sel+=("$b"); done
	elif [ "$(field "$b" 2)" = "$LANE" ]; then
		sel+=("$b")
	fi
done
for p in "${PICK[@]}"; do
	printf '%s\n' "${BENCHES[@]}" | cut -d'|' -f1 | grep -qx -- "$p" || { echo "bench-smoke: no benchmark $p (--list)" >&2; exit 2; }
done

# Every script under bench/ has its line above: a benchmark added without
# one fails the full run (the host lane's), named.
uncovered=()
if [ ${#PICK[@]} = 0 ] && [ "$LANE" = host ]; then
	for f in bench/*.sh bench/*/*.sh; do
		printf '%s\n' "${BENCHES[@]}" | cut -d'|' -f7- | grep -qF -- "$f" || uncovered+=("$f")
	done
fi

SCALE=${BENCH_SMOKE_TIMEOUT:-1}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/bench-smoke.XXXXXX")
chmod 755 "$TMP"
# Go's caches stay where they are (HOME moves into the temporary directory
# for each benchmark): a benchmark's `go build` finds them.
for k in GOCACHE GOMODCACHE GOPATH; do
	[ -n "${!k:-}" ] || export "$k=$(go env "$k" 2>/dev/null)"
done
current=
# The processes carrying a benchmark's BENCH_SMOKE_ID, this script's own
# excepted.
marked() {
	grep -lsxzF "BENCH_SMOKE_ID=$1" /proc/[0-9]*/environ | sed 's|^/proc/\([0-9]*\)/environ$|\1|' | grep -vx -e "$$" -e "$BASHPID"
	return 0
}
# gone PID SECONDS: waits until PID has exited, at most SECONDS (the
# process's pidfd; status 1 if it still runs).
gone() {
	kill -0 "$1" 2>/dev/null || return 0
	python3 -c '
import os, select, sys
try:
    fd = os.pidfd_open(int(sys.argv[1]))
except ProcessLookupError:
    sys.exit(0)
sys.exit(0 if select.select([fd], [], [], float(sys.argv[2]))[0] else 1)' "$1" "$2" 2>/dev/null && return 0
	# No python3 or no pidfd: tail follows the pid.
	timeout "$2" tail --pid="$1" -f /dev/null 2>/dev/null
	! kill -0 "$1" 2>/dev/null
}
# stop PID...: SIGTERM (an agent removes its socket as it ends), then
# SIGKILL for what still runs after 10 s.
stop() {
	local p
	for p in "$@"; do kill -TERM "$p" 2>/dev/null; done
	for p in "$@"; do gone "$p" 10 || kill -KILL "$p" 2>/dev/null; done
}
# cleanup_bench DIR: the agents started on the benchmark's socket, then
# every process still marked with its id.
cleanup_bench() {
	local d=$1 pids
	pids=$(sed -n 's/.*listening on .* (pid \([0-9]*\)).*/\1/p' "$d/run/pitraced.log" 2>/dev/null)
	# shellcheck disable=SC2086
	[ -z "$pids" ] || stop $pids
	pids=$(marked "$d")
	# shellcheck disable=SC2086
	[ -z "$pids" ] || stop $pids
}
finish() {
	[ -z "$current" ] || cleanup_bench "$current"
	if [ "${BENCH_SMOKE_KEEP:-}" = 1 ]; then
		echo "bench-smoke: kept $TMP"
	else
		rm -rf "$TMP"
	fi
}
trap finish EXIT
trap 'exit 130' INT TERM

# missing NEEDS: what of NEEDS is not here, as "what (package)" words.
missing() {
	local n c p out=()
	for n in $1; do
		if [ "$n" = root ]; then
			[ "$(id -u)" = 0 ] || out+=("root")
			continue
		fi
		c=${n%%:*} p=${n#*:}
		case $c in
		/*) [ -x "$c" ] || out+=("$c ($p)") ;;
		*) command -v "$c" >/dev/null || out+=("$c ($p)") ;;
		esac
	done
	echo "${out[*]}"
}

echo "bench-smoke: ${#sel[@]} benchmarks at their smallest size, $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), CI=${CI:-}"
start=$(date +%s)
results=()
npass=0 nskip=0 nfail=0
for b in "${sel[@]}"; do
	name=$(field "$b" 1)
	limit=$(awk -v l="$(field "$b" 3)" -v s="$SCALE" 'BEGIN {printf "%d", l * s}')
	needs=$(field "$b" 4)
	endre=$(field "$b" 5)
	goalre=$(field "$b" 6)
	cmd=$(field "$b" 7-)
	d=$TMP/$name
	mkdir -p "$d/tmp" "$d/home/.cache" "$d/home/.config" "$d/run" "$d/xdgrun" "$TMP/data"
	chmod 700 "$d/run" "$d/xdgrun"
	miss=$(missing "$needs")
	if [ -n "$miss" ]; then
		if [ "${CI:-}" = true ]; then
			status=FAIL note="missing $miss (CI=true: a missing dependency is a failure; make deps installs it)"
			nfail=$((nfail + 1))
		else
			status=SKIP note="missing $miss (make deps installs it; set CI=true to make this a failure)"
			nskip=$((nskip + 1))
		fi
		echo "==== $name: $status: $note"
		results+=("$name|$status|0|$note")
		continue
	fi
	echo "==== $name: $cmd (limit ${limit}s)"
	current=$d
	s=$(date +%s%N)
	# (cmd is one of the lines above: "bash SCRIPT ARGS" is added when it
	# starts with the script's path)
	case $cmd in bench/*) cmd="bash $cmd" ;; esac
	# (in the background: the wait for it gives way to a signal, whose
	# trap stops it and what it started)
	env BENCH_SMOKE_ID="$d" TMPDIR="$d/tmp" HOME="$d/home" XDG_CACHE_HOME="$d/home/.cache" \
		XDG_CONFIG_HOME="$d/home/.config" XDG_RUNTIME_DIR="$d/xdgrun" PERFINSP_SOCKET="$d/run/pitraced.sock" \
		DATA="$TMP/data" timeout -k 10 "$limit" bash -c "$cmd" </dev/null >"$d/out" 2>&1 &
	wait $!
	rc=$?
	secs=$(awk -v a="$s" -v b="$(date +%s%N)" 'BEGIN {printf "%.1f", (b - a) / 1e9}')
	# The agents started on its socket (scripts/run.tprof and the others
	# start one when none answers, and leave it to its idle exit, as for a
	# user) are stopped; what else it leaves is a failure: processes
	# still running a few seconds after it (an agent it stopped may take
	# a moment to exit), files in its TMPDIR.
	agents=$(sed -n 's/.*listening on .* (pid \([0-9]*\)).*/\1/p' "$d/run/pitraced.log" 2>/dev/null)
	# shellcheck disable=SC2086
	[ -z "$agents" ] || stop $agents
	left=()
	for p in $(marked "$d"); do
		gone "$p" 5 && continue
		left+=("$p ($(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | cut -c1-100 | sed 's/ *$//'))")
	done
	cleanup_bench "$d"
	current=
	files=$(cd "$d/tmp" && find . -mindepth 1 -maxdepth 2 | head -5)
	endline=$(grep -E -- "$endre" "$d/out" | tail -1)
	note=
	if [ $rc = 124 ] || [ $rc = 137 ]; then
		status=FAIL note="did not end within ${limit}s"
	elif [ $rc = 1 ] && [ -n "$goalre" ] && [ -n "$endline" ] && grep -qE -- "$goalre" "$d/out"; then
		status=ok note="ran to its end; exit 1: a goal missed in this one short run (/$goalre/), not checked here"
	elif [ $rc != 0 ]; then
		status=FAIL note="exit $rc"
	elif grep -q '^vmtest: SKIP: ' "$d/out"; then
		status=SKIP note=$(sed -n 's/^vmtest: SKIP: //p' "$d/out" | head -1)
	elif [ -z "$endline" ]; then
		status=FAIL note="exit 0 but no line matching /$endre/: its result table was not printed"
	else
		status=ok
	fi
	if [ ${#left[@]} -gt 0 ]; then
		status=FAIL note="${note:+$note; }left running (stopped now): ${left[*]}"
	fi
	if [ -n "$files" ]; then
		status=FAIL note="${note:+$note; }left in its TMPDIR: $(echo "$files" | paste -sd' ')"
	fi
	if [ "$status" = SKIP ]; then
		nskip=$((nskip + 1))
		echo "==== $name: SKIP: $note"
	elif [ "$status" = ok ]; then
		npass=$((npass + 1))
		echo "==== $name: ok in ${secs}s${note:+ ($note)}${agents:+ (agent on its socket stopped)}"
		echo "     $endline"
	else
		nfail=$((nfail + 1))
		echo "==== $name: FAILED in ${secs}s: $note; its output's last lines:"
		tail -40 "$d/out" | sed 's/^/     | /'
	fi
	results+=("$name|$status|$secs|$note")
	[ "${BENCH_SMOKE_KEEP:-}" = 1 ] || rm -rf "$d"
done

echo "==== bench-smoke: $(($(date +%s) - start)) s in all"
for r in "${results[@]}"; do
	IFS='|' read -r n st secs note <<<"$r"
	printf '  %-18s %-5s %7s s  %s\n' "$n" "$st" "$secs" "$note"
done
for f in "${uncovered[@]}"; do
	echo "  $f: FAILED: no line in scripts/bench-smoke.sh's BENCHES runs it (add one: its smallest size, its end line)"
	nfail=$((nfail + 1))
done
echo "benchmarks: $npass passed, $nskip skipped, $nfail failed"
[ "$nfail" = 0 ]
