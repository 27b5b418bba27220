#!/bin/bash
# Runs every test: make test calls it with the targets of each lane.
#
#   host lane  TEST_TARGETS, one after another (gofmt/vet, go test ./...,
#              fuzz runs, the race detector, the C tests)
#   VM lane    VM_TEST_TARGETS, one after another, niced: the kernel-module
#              tests in QEMU (TCG). They count guest instructions or wait on
#              conditions, not host time, so they can run beside the host
#              lane; the niced lane leaves the host lane's timing-sensitive
#              tests the CPU when they want it.
#
# Everything is built once first. Each target's output goes to
# build/test-logs/TARGET.log and is printed whole when the target ends;
# a summary with each target's time closes the run, then one line
# "targets: N passed, N failed". The exit code is non-zero when any
# target failed.
set -uo pipefail
cd "$(dirname "$0")/.."
MAKE=${MAKE:-make}
LOGS=build/test-logs
rm -rf "$LOGS"
mkdir -p "$LOGS"
start=$(date +%s)

# A fresh make reads mk/*.mk again: what deps just installed (the JDK)
# decides what is built.
if ! $MAKE --no-print-directory build >"$LOGS/build.log" 2>&1; then
	cat "$LOGS/build.log"
	echo "make test: the build failed"
	echo "targets: 0 passed, 1 failed"
	exit 2
fi

# run_lane NAME NICE TARGETS...: each target in turn; its log is printed
# when it ends (under a lock, so two lanes' logs do not interleave).
run_lane() {
	local lane=$1 niceness=$2
	shift 2
	local t s rc
	for t in "$@"; do
		s=$(date +%s)
		nice -n "$niceness" $MAKE --no-print-directory "$t" >"$LOGS/$t.log" 2>&1
		rc=$?
		echo "$t $rc $(($(date +%s) - s)) $lane" >>"$LOGS/summary"
		{
			flock 8
			echo "==== $t ($lane lane): $([ $rc = 0 ] && echo ok || echo "FAILED (exit $rc)") in $(($(date +%s) - s)) s"
			cat "$LOGS/$t.log"
		} 8>"$LOGS/.print"
	done
}

run_lane host 0 $TEST_TARGETS &
host=$!
run_lane vm 10 $VM_TEST_TARGETS &
vm=$!
wait $host $vm

echo "==== make test: $(($(date +%s) - start)) s in all"
passed=0 failed=0
while read -r t rc secs lane; do
	printf '  %-24s %-5s %5s s  %s\n' "$t" "$lane" "$secs" "$([ "$rc" = 0 ] && echo ok || echo "FAILED (exit $rc)")"
	if [ "$rc" = 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
done <"$LOGS/summary"
echo "targets: $passed passed, $failed failed"
[ "$failed" = 0 ]
