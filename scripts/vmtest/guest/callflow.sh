#!/bin/sh
# Runs inside the -icount VM (busybox sh; scripts/vmtest/run.sh callflow):
# call-flow exactness. The guest TSC counts instructions, and
# the module's PTT metric tsc is the thread's TSC with interrupts and other
# threads factored out: a calibrated call flow of callflow_exact must give
# every function's own instructions as the ITrace of the same binary (hooks
# not recording) counted them on the host (bin/hookit check), calls exact.
# The number of leaf calls a pass is the one the reference was made with.
N=$(cat /bin/callflow_exact.n)
. /guest/lib.sh
echo "vmtest: --- call flows under -icount: insmod pitrace.ko"
insmod /pitrace.ko || fail "insmod"
export PERFINSP_BACKEND=kmod
# The exactness holds for activations no interrupt hit: PTT factors out
# the irq handlers, not the entry/exit code around them (~1,000
# instructions each under -icount), so a device interrupt that lands in a
# small function puts it out of tolerance (hookit check says so). Such a
# pass is repeated, up to three in all; any other failure fails at once.
attempt() {
	rm -rf /tmp/hk
	echo "vmtest: --- callflow_exact $N with libhookit, metric tsc (module), pass $1"
	HOOKIT_DIR=/tmp/hk HOOKIT_METRIC=tsc callflow_exact "$N" >/tmp/out 2>&1 || { cat /tmp/out; fail "callflow_exact"; }
	sed 's/^/  /' /tmp/out
	grep -q '^backend=kmod$' /tmp/hk/hookit-*.info || { cat /tmp/hk/hookit-*.info; fail "the PTT backend is not the module"; }
	sed 's/^/  info: /' /tmp/hk/hookit-*.info
	hookit report -i /tmp/hk >/tmp/out 2>&1 || { cat /tmp/out; fail "hookit report"; }
	sed 's/^/  /' /tmp/out
	echo "vmtest: --- log-rt (main thread)"
	sed -n '1,40p' /tmp/hk/log-rt | sed 's/^/  /'
	# DS / IN come from the module's work area: numbers, not '-'.
	grep -qE '^ +1 +[0-9]+ +[0-9]+ +[0-9]+ +-?[0-9]+ +[0-9]+ +[0-9]+  work$' /tmp/hk/log-rt || fail "log-rt has no DS / IN figures for work"
	in=$(awk '$NF != "NAME" && $6 ~ /^[0-9]+$/ && $7 ~ /^[0-9]+$/ {s += $7} END {print s + 0}' /tmp/hk/log-rt)
	echo "vmtest: interrupts charged to functions and threads: $in"
	echo "vmtest: --- exactness: the ITrace of the same binary, hooks not recording (sequence minima less the environmental overhead must pass; minima alone, start-up and raw beside)"
	hookit check -i /tmp/hk --itrace /bin/callflow_exact.arc --cal minima >/tmp/out 2>&1
	rc=$?
	sed 's/^/  /' /tmp/out
	[ $rc -eq 0 ] && return 0
	# Only functions out because interrupts hit them may be retried.
	outs=$(grep -c ' out:' /tmp/out)
	intr=$(grep -c ' out:.*interrupts while it ran' /tmp/out)
	[ "$outs" -gt 0 ] && [ "$outs" = "$intr" ] || fail "hookit check"
	echo "vmtest: pass $1: $outs functions out, each hit by an interrupt: the pass is repeated"
	return 1
}
attempt 1 || attempt 2 || attempt 3 || fail "hookit check: interrupts hit measured functions in three passes"
echo "vmtest: --- for information (not a pass criterion): against callgrind of the uninstrumented build"
hookit check -i /tmp/hk --callgrind /bin/callflow_exact.callgrind --cal minima 2>&1 | sed 's/^/  /'
echo "PITRACE-CALLFLOW-PASS"
