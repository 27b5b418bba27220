#!/bin/sh
# Runs inside the VM (run.sh itrace): ITrace through the pitrace module.
# Expected counts come from the host (itrace-host.sh: callgrind of the same
# static binaries, in /bin/*.cg). Each check prints one "vmtest:" line.
fail() {
	echo "vmtest: FAIL: $*"
	swtrace off >/dev/null 2>&1
	exit 1
}
step() { echo "vmtest: --- $* (uptime $(cut -d' ' -f1 /proc/uptime) s)"; }
run() {
	"$@" >/tmp/out 2>&1
	rc=$?
	sed 's/^/  /' /tmp/out
	[ $rc -eq 0 ] || fail "$* (exit $rc)"
}
uptime_ms() { awk '{ printf "%d\n", $1 * 1000 }' /proc/uptime; }
# wait_until SECONDS CMD...: poll CMD every 50 ms until it succeeds
wait_until() {
	limit=$(( $(uptime_ms) + $1 * 1000 ))
	shift
	while ! "$@" >/dev/null 2>&1; do
		[ "$(uptime_ms)" -lt "$limit" ] || return 1
		sleep 0.05
	done
}
stopped() { awk '{ exit !($3 == "T" || $3 == "t") }' "/proc/$1/stat"; }
# start_stopped CMD...: CMD stops itself before its exec; sets $child
start_stopped() {
	sh -c 'kill -STOP $$; exec "$0" "$@"' "$@" &
	child=$!
	wait_until 10 stopped "$child" || fail "$1 did not stop before its exec"
}
N=${ITRACE_N:-3000}

step "itrace: the example (static, $N leaf calls, a second thread, a signal handler) through the module from its exec"
run swtrace init -t 32M -m 2M
run swtrace on --discard
start_stopped /bin/itrace "$N"
run swtrace itrace on --at-exec -p "$child"
t0=$(uptime_ms)
kill -CONT "$child"
wait "$child" || fail "the traced example exited $?"
t1=$(uptime_ms)
run swtrace off
run swtrace get /tmp/it.nrm2
mkdir -p /tmp/itout
run post -r /tmp/it.nrm2 -itrace --callgrind /tmp/it.cg -o /tmp/itout
step "itrace: per-function exclusive instructions and calls = callgrind's on the host (same binary)"
run pitest itrace-cmp /bin/itrace.cg /tmp/it.cg
ins=$(awk '/^ *instructions/ { print $2; exit }' /tmp/itout/itrace.out)
sed -n '1,12p' /tmp/itout/itrace.out | sed 's/^/  /'
echo "vmtest: itrace module: ${ins:-?} instructions traced in $((t1 - t0)) ms wall (TCG)"

step "itrace: ITraceOn/ITraceOff (C, libperfutil) around one call trace exactly that call"
run swtrace init -t 8M -m 1M
run swtrace on --discard
run itrace_onoff
grep -q "on=0" /tmp/out || fail "ITraceOn failed on the module"
run swtrace off
run swtrace get /tmp/onoff.nrm2
mkdir -p /tmp/onoff
run post -r /tmp/onoff.nrm2 -itrace --callgrind /tmp/onoff.cg -o /tmp/onoff
run pitest itrace-cmp /bin/itrace_onoff.cg /tmp/onoff.cg traced_call
for f in before_section after_section main; do
	if grep -q "$f" /tmp/onoff.cg; then fail "$f is in the trace of ITraceOn/Off around traced_call"; fi
done
echo "vmtest: ITraceOn/Off: traced_call only (before_section, after_section and main's own code absent)"

step "itrace: a traced process killed mid-trace; itrace off from another shell; rmmod while tracing"
run swtrace init -t 64M -m 2M
run swtrace on --discard
start_stopped /bin/itrace 100000000
run swtrace itrace on --at-exec -p "$child"
kill -CONT "$child"
# it is traced when its records flow
wait_until 30 sh -c "swtrace info | grep -q 'records: [1-9]'" || true
if rmmod pitrace >/tmp/out 2>&1; then fail "rmmod succeeded while a thread is traced"; fi
echo "vmtest: rmmod while tracing refused: $(head -1 /tmp/out)"
kill -KILL "$child"
wait "$child" 2>/dev/null
echo "vmtest: killed mid-trace: reaped"
start_stopped /bin/itrace 100000000
run swtrace itrace on --at-exec -p "$child"
kill -CONT "$child"
sleep 0.5
run swtrace itrace off -p "$child"
# untraced, 10^8 leaf calls take a few seconds of TCG; traced, hours
wait_until 120 sh -c "! kill -0 $child" || fail "the process did not finish at native speed after itrace off"
wait "$child" || fail "the process let go by itrace off exited $?"
echo "vmtest: itrace off from another shell: the process went on untraced and finished"
run swtrace off
run swtrace get /tmp/kill.nrm2
run post -r /tmp/kill.nrm2 -show -o /tmp/killout
grep -c "ITRACE_END" /tmp/killout/* | head -3 | sed 's/^/  /'

step "itrace: a normal-mode buffer filled by ITrace: tracing stops and the process is let go"
run swtrace init -t 64K -m 1M
run swtrace on --discard
start_stopped /bin/itrace 30000000
run swtrace itrace on --at-exec -p "$child"
kill -CONT "$child"
wait_until 120 sh -c "! kill -0 $child" || fail "the process was not let go when the buffer filled"
wait "$child" || fail "exit $?"
swtrace info | grep -i "full\|stopped" | head -2 | sed 's/^/  /'
run swtrace off
echo "vmtest: buffer full: the process finished untraced"

step "itrace: rmmod after tracing"
wait_until 30 rmmod pitrace || fail "rmmod after ITrace"
insmod /pitrace.ko || fail "insmod again"
echo "PITRACE-ITRACE-DONE"
