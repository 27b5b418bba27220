#!/bin/sh
# The guest test scripts' shell helpers (busybox sh), sourced by each:
#   . /guest/lib.sh
# Set before sourcing or any time after:
#   FAIL_PREFIX    text put before every failure message (e.g. "jit: ")
#   FAIL_TRACE_OFF 1: a failure turns tracing off first (a test that leaves
#                  a thread traced would slow every later step)

# fail MSG: the failure line run.sh looks for, then exit 1.
fail() {
	echo "vmtest: FAIL: ${FAIL_PREFIX:-}$*"
	[ "${FAIL_TRACE_OFF:-0}" = 1 ] && swtrace off >/dev/null 2>&1
	exit 1
}

# step TEXT: a section header with the guest's uptime.
step() { echo "vmtest: --- $* (uptime $(cut -d' ' -f1 /proc/uptime) s)"; }

# run CMD...: run a command, show its output indented, fail on error.
run() {
	"$@" >/tmp/out 2>&1
	rc=$?
	sed 's/^/  /' /tmp/out
	[ $rc -eq 0 ] || fail "$* (exit $rc)"
}

uptime_ms() { awk '{ printf "%d\n", $1 * 1000 }' /proc/uptime; }

# wait_until SECONDS CMD...: poll CMD every 50 ms until it succeeds.
wait_until() {
	limit=$(($(uptime_ms) + $1 * 1000))
	shift
	while ! "$@" >/dev/null 2>&1; do
		[ "$(uptime_ms)" -lt "$limit" ] || return 1
		sleep 0.05
	done
}

# stopped PID: the process is stopped (T, or t under ptrace).
stopped() { awk '{ exit !($3 == "T" || $3 == "t") }' "/proc/$1/stat"; }

# start_stopped CMD...: CMD stops itself before its exec; sets $child.
start_stopped() {
	sh -c 'kill -STOP $$; exec "$0" "$@"' "$@" &
	child=$!
	wait_until 10 stopped "$child" || fail "$1 did not stop before its exec"
}
