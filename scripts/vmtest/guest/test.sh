#!/bin/sh
# Runs inside the VM (busybox sh): the pitrace module tests. Every check
# prints one "vmtest:" line; the last line is the pass marker.
# $1: the mode (scripts/vmtest/run.sh lists them): "test" (default) and
# "robust" run the functional test below; the others one part (mode_NAME).
. /guest/lib.sh

step "insmod pitrace.ko"
insmod /pitrace.ko || fail "insmod"
[ -c /dev/pitrace ] || fail "/dev/pitrace missing after insmod"
perm=$(stat -c %a /dev/pitrace)
[ "$perm" = 600 ] || fail "/dev/pitrace mode $perm, want 600 (root only)"
echo "vmtest: /dev/pitrace mode $perm"

# the module under hostile or unusual use (scripts/vmtest/progs/harden.c)
hardening() {
	step "hardening: a user's process ITraced and PTT-watched execs a set-user-ID root program: both end at the exec"
	run harden itracesuid 2000
	pids=$(sed -n 's/^harden: itracesuid: pids setuid \([0-9]*\) atexec \([0-9]*\) plain \([0-9]*\) loop.*/setuid=\1 atexec=\2 plain=\3/p' /tmp/out)
	[ -n "$pids" ] || fail "harden itracesuid printed no pids"
	run swtrace get /tmp/suid.nrm2
	run pitest itrace-exec /tmp/suid.nrm2 2000 $pids
	run swtrace free
	step "hardening: a caller stalled on a userfaultfd page does not hold others"
	run harden uffd
	step "hardening: unknown ioctls answer ENOTTY at once while pt.lock is held"
	run harden enotty
	step "hardening: argument sizes (older and newer structs)"
	run harden sized
	step "hardening: STATUS strings zeroed after their NUL"
	run harden strtail
	step "hardening: PTT_WATCH racing thread exit (1000 attempts)"
	run harden watchexit 1000
	step "hardening: PTT teardown of 1000 watched threads"
	run harden teardown 1000
	step "hardening: PTT_WATCH follows ptrace read rules"
	run harden perm
	step "hardening: CPU 1 offline and online while tprof and PTT count"
	run harden hotplug
	step "PTT: threads of a watched process get areas at creation (20 x 30 ms)"
	run harden inherit
	step "hardening: call-stack depth limits (0, 1, 127, 128, huge) and stacks at each"
	run harden stackdepth 200
	step "hardening: ITRACE_ON / OFF's pid array on a userfaultfd page; a failed ON undone"
	run harden itraceuffd
	step "hardening: ITRACE_ON pids_from over 5,000 processes selects every one"
	run harden itracemany 5000
	step "hardening: ITRACE_STATS answers only the thread whose ITrace ended last"
	run harden itracestats
	step "hardening: PITRACE_IOC_JIT names at a page edge, its exact size"
	run harden jit
}

mode_itrace() {
	sh /guest/itrace.sh
}

mode_jit() {	# JIT records through the module
	sh /guest/jit.sh || fail "jit"
	echo "PITRACE-JIT-DONE"
}

mode_harden() {
	hardening
	rmmod pitrace || fail "rmmod after the hardening tests"
	echo "PITRACE-HARDEN-DONE"
}

# call stacks at every tprof tick (scripts/vmtest/pitest/stacks.go)
call_stacks() {
	step "call stacks through the module: cpuburn's paths, a stack over the limit, kernel frames"
	run pitest stacks
}

# the scheduler records: wake-ups, the stacks of waits (scripts/vmtest/pitest/offcpu.go)
off_cpu() {
	step "scheduler records through the module: the waits example's sleeps and pipe reads under their stacks, their wake-ups"
	run pitest offcpu
}

mode_offcpu() {
	off_cpu
	rmmod pitrace || fail "rmmod after the scheduler-record tests"
	dmesg | grep -i pitrace | sed 's/^/  dmesg: /'
	echo "PITRACE-OFFCPU-DONE"
}

mode_stacks() {
	call_stacks
	step "hardening: call-stack depth limits (0, 1, 127, 128, huge) and stacks at each"
	run harden stackdepth 200
	rmmod pitrace || fail "rmmod after the call-stack tests"
	echo "PITRACE-STACKS-DONE"
}

# sched_bench: a pipe ping-pong (scripts/vmtest/progs/pingpong.c) with tracing
# off, with dispatch, with dispatch and callstack: guest instructions per
# round trip (-icount) and the scheduler records' bytes per DISPATCH (last:
# it leaves tprof disabled, which the other benchmarks expect enabled)
sched_bench() {
	n=2000
	step "scheduler records: cost per round trip of a pipe ping-pong ($n round trips)"
	pingpong $n >/tmp/out 2>&1 || fail "pingpong"
	echo "bench: sched: no tracing (no probes attached): $(cat /tmp/out)"
	for recs in "dispatch" "dispatch callstack"; do
		swtrace free >/dev/null 2>&1
		run swtrace mode normal
		run swtrace init -t 16M -m 1M
		run swtrace enable --only $recs
		run swtrace on
		pingpong $n >/tmp/pp 2>&1 || fail "pingpong under $recs"
		run swtrace off
		run swtrace get /tmp/pp.nrm2
		pitest schedbytes /tmp/pp.nrm2 >/tmp/sb 2>&1 || { cat /tmp/sb; fail "schedbytes"; }
		echo "bench: sched: $recs: $(cat /tmp/pp); $(cat /tmp/sb)"
		rm -f /tmp/pp.nrm2
	done
	swtrace free >/dev/null 2>&1
	pingpong $n >/tmp/out 2>&1 || fail "pingpong"
	echo "bench: sched: tracing off, probes attached: $(cat /tmp/out)"
	pitest perfsched /bin/pingpong $n >/tmp/out 2>&1 || { cat /tmp/out; fail "perfsched"; }
	echo "bench: sched: $(cat /tmp/out)"
	pitest perfsched /bin/pingpong $n g >/tmp/out 2>&1 || { cat /tmp/out; fail "perfsched -g"; }
	echo "bench: sched: $(cat /tmp/out)"
}

mode_bench() {
	step "benchmark"
	run pitest bench 20000
	sh /guest/method.sh bench || fail "method event cost"
	sched_bench
	echo "PITRACE-BENCH-DONE"
}

mode_ptt() {
	step "PTT functional checks"
	run ptt func
	step "PTT perf counter metrics"
	run ptt perf
	step "PTT user page faults' figures (-icount: the code outside the windows exact)"
	run ptt faults icount
	step "PTT the rseq update after a switch (-icount: the code outside the windows exact)"
	run ptt resume icount
	step "PTT watch/read of another process"
	run ptt watch
	step "call stacks: cpuburn's paths in the ratio of its instructions (-icount: the clock counts instructions)"
	run pitest stacks-ratio
	step "PTT: the C library on the module (-icount)"
	run ptt_ctest_kmod
	step "PTT benchmark: virtualized vs raw TSC (-icount shift=0,sleep=off)"
	run ptt bench
	rmmod pitrace || fail "rmmod after ptt"
	echo "PITRACE-PTT-DONE"
}

# The modes that run one part only; "test" and "robust" run the rest of
# this script (the functional test; robust: its process-killing part).
case "$1" in
itrace | jit | harden | offcpu | stacks | bench | ptt)
	"mode_$1"
	exit $?
	;;
esac

if [ "$1" != robust ]; then
step "swtrace through the module: tprof of cpuburn"
run swtrace info
grep -q "backend: kmod" /tmp/out || fail "swtrace does not use the kmod backend"
run swtrace init -t 2M -m 256K
run swtrace enable tprof
run swtrace setrate 1000
run swtrace on
run cpuburn 40
run swtrace off
run swtrace get /tmp/swtrace.nrm2
run swtrace info
run pitest check-tprof /tmp/swtrace.nrm2 /bin/cpuburn
[ -x /bin/post ] || fail "no /bin/post in the guest (run.sh builds it into the initramfs)"
step "post -tprof"
(cd /tmp && post -r /tmp/swtrace.nrm2 -tprof >/tmp/post.log 2>&1) || { cat /tmp/post.log; fail "post"; }
[ -s /tmp/tprof.out ] || fail "post wrote no tprof.out"
head -40 /tmp/tprof.out | sed 's/^/  /'
# Module_Symbol: the top module is the example, its first symbol row the hottest function
first=$(awk '/^\)\) Module_Symbol/ {on=1} on && $1 == "SYM" {print; exit}' /tmp/tprof.out)
echo "vmtest: first symbol row of Module_Symbol: $first"
awk '/^\)\) Module_Symbol/ {on=1} on && NF' /tmp/tprof.out | head -12 | sed 's/^/  /'
echo "$first" | grep -q heavy || fail "tprof.out does not name heavy first"

call_stacks
off_cpu
sh /guest/jit.sh || fail "jit"

step "swtrace messages"
swtrace free >/dev/null 2>&1
swtrace on >/tmp/out 2>&1 || fail "on with no init"
sed 's/^/  /' /tmp/out
grep -q "not initialized" /tmp/out || fail "on before init: no message"
run swtrace off
if swtrace on >/tmp/out 2>&1; then fail "on over an unsaved trace succeeded"; fi
sed 's/^/  /' /tmp/out
grep -q "swtrace get" /tmp/out || fail "on over an unsaved trace: unclear message"
run swtrace on --discard
if swtrace get /tmp/x.nrm2 >/tmp/out 2>&1; then fail "get while on succeeded"; fi
sed 's/^/  /' /tmp/out
run swtrace hook 0x100 7 1 2 3
run swtrace off
run swtrace free
if swtrace mode cont -f /nonexistent/dir/stream.nrm2 >/tmp/out 2>&1; then fail "cont mode with an unwritable stream file accepted"; fi
sed 's/^/  /' /tmp/out
grep -q "/nonexistent/dir" /tmp/out || fail "unwritable stream file: the message does not name the directory"
swtrace info | grep -q "state: on" && fail "tracing on after a refused mode"
run swtrace free
run swtrace mode normal

step "MTE of an executable mapping and its unmap"
run pitest unmap /bin/busybox

step "MTE: the exec path as the kernel found it, the parent after exec"
run pitest mteexec /bin cpuburn

step "bad input"
run pitest badinput

step "MSR ioctls: msr -r IA32_TSC -a, TSC_AUX write/restore, allowlist, faults, non-root"
run pitest msr

step "modes with small buffers"
run pitest modes
# the wrap/cont drainer started the agent: stop it, so that the PTT timing
# checks below have their CPUs to themselves
run pitest agent-stop

step "PTT: per-thread TSC work areas"
run ptt func
step "PTT: two threads pinned to two CPUs"
run ptt smp
step "PTT: perf counter metrics"
run ptt perf
step "PTT: user page faults' figures"
run ptt faults
step "PTT: the rseq update after a switch"
run ptt resume
step "PTT: watch/read of another process"
run ptt watch
step "PTT: threads mapping, unmapping and exiting in 4 processes (one killed)"
run ptt stress 10
step "PTT: the Go library on the module backend"
run pitest pttgo
step "PTT: the C library (libperfutil.a) on the module backend"
ps -o pid,stat,time,comm 2>/dev/null | sed 's/^/  ps: /'
run ptt_ctest_kmod
step "PTT: the ptt tool on the module (ptt on -p / -a, dump, off)"
run pitest pttmod /bin/ptt-tool

hardening

fi
ps -o pid,stat,time,comm 2>/dev/null | awk '$2 !~ /S|I/' | sed 's/^/  ps: /'
step "robustness: 2 x 50000 random ioctls while a third process toggles on/off/get"
swtrace init -t 64K -m 64K >/dev/null 2>&1
pitest fuzz 50000 1 >/tmp/fz1 2>&1 &
p1=$!
pitest fuzz 50000 2 >/tmp/fz2 2>&1 &
p2=$!
rm -f /tmp/fuzz.done
pitest toggle 1000 /tmp/fuzz.done >/tmp/tg 2>&1 &
p3=$!
wait $p1; r1=$?
wait $p2; r2=$?
touch /tmp/fuzz.done
wait $p3; r3=$?
sed 's/^/  /' /tmp/fz1 /tmp/fz2 /tmp/tg
[ $r1 -eq 0 ] && [ $r2 -eq 0 ] || fail "fuzzers failed ($r1 $r2)"
[ $r3 -eq 0 ] || fail "toggler failed ($r3)"

step "a process killed while it maps the buffers"
swtrace free >/dev/null 2>&1
run swtrace mode normal
run swtrace init -t 64K -m 64K
run swtrace on
pitest holdmap >/tmp/hm 2>&1 &
hp=$!
sleep 1
cat /tmp/hm | sed 's/^/  /'
kill -9 $hp
wait $hp 2>/dev/null
run swtrace off
run swtrace get /tmp/after-kill.nrm2
run swtrace free

step "rmmod while tracing"
run swtrace init -t 256K -m 64K
run swtrace enable tprof dispatch
run swtrace on
cpuburn 5 >/dev/null
rmmod pitrace || fail "rmmod while tracing"
[ -e /dev/pitrace ] && fail "/dev/pitrace still there after rmmod"
echo "vmtest: rmmod while tracing ok"

step "insmod again (perm=0660) and a clean trace"
insmod /pitrace.ko perm=0660 || fail "insmod again"
perm=$(stat -c %a /dev/pitrace)
[ "$perm" = 660 ] || fail "/dev/pitrace mode $perm with perm=0660"
echo "vmtest: /dev/pitrace mode $perm with perm=0660"
run swtrace info
run swtrace init -t 2M -m 256K
run swtrace enable tprof
run swtrace on
run cpuburn 40
run swtrace off
run swtrace get /tmp/again.nrm2
run pitest check-tprof /tmp/again.nrm2 /bin/cpuburn
run swtrace free
rmmod pitrace || fail "final rmmod"
dmesg | grep -i pitrace | sed 's/^/  dmesg: /'
echo "PITRACE-VMTEST-PASS"
