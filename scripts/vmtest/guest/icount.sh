#!/bin/sh
# Runs inside the -icount VM (busybox sh; scripts/vmtest/run.sh icount): the
# ITrace identity "user instructions traced + kernel instructions recorded =
# the TSC delta of the traced section" (docs/itrace.md).  Under
# -icount shift=0,sleep=off the guest TSC counts instructions.
#
# itrace_icount runs one section traced by the module (ITRACE_ON/OFF of the
# thread itself) and prints the module's ITRACE_STATS; post counts the user
# instructions U in the trace.  For each section
#   R = span - (U - 1) - (trap_tsc + sys_tsc + irq_tsc + fault_tsc + sig_tsc)
# is the kernel glue no module point can see: per single-step trap the
# #DB entry up to the notifier and the return to user after it (G), per
# system call its entry/exit outside sys_enter..sys_exit (S), per page
# fault its entry up to the tracepoint less what its window holds that a
# trap's gap would (F: the return, one instruction and the next trap's
# entry are inside the fault's window, so F may be negative), and a
# constant for the span's two ends (C).  The span runs from the first
# trap's notifier entry (after the first instruction) to the sys_enter of
# ITRACE_OFF, so it holds U - 1 user instructions; kernel windows that
# began before it are not in the statistics.  Under -icount each glue is a
# constant: G and C come from two
# runs of straight-line nops (200 and 400: user instructions known a
# priori), S from 20 getppid calls, F from 16 page faults, Sg from 10
# signals to the thread itself (per delivery, what lies outside its
# measured window signal_deliver..frame set up).  The mixed section (calls,
# returns, taken and not-taken branches, system calls, two page faults, a
# signal and its handler) must then satisfy
#   R = traps*G + syscalls*S + faults*F + signals*Sg + C     exactly,
# so one user instruction lost or counted twice by the trace fails it.
# Sections hit by a timer interrupt (its glue is not calibrated) are run again.
. /guest/lib.sh
step "itrace -icount identity: insmod pitrace.ko"
insmod /pitrace.ko || fail "insmod"
export PERFINSP_BACKEND=kmod
ICOUNT_SHOW= # set to print each section's ITrace records
dmesg | grep -i 'tsc.*MHz' | head -2 | sed 's/^/  /'
: >/tmp/irqtries

# section NAME: run it (again while an interrupt hit it); sets the
# variables NAME_u NAME_span NAME_traps ... from its last run
section() {
	sec=$1 try=0
	while :; do
		try=$((try + 1))
		swtrace init -t 4M -m 1M >/dev/null 2>&1 || fail "swtrace init"
		swtrace disable tprof >/dev/null 2>&1
		swtrace on --discard >/dev/null 2>&1 || fail "swtrace on"
		itrace_icount "$sec" >/tmp/ic.out 2>&1
		rc=$?
		swtrace off >/dev/null 2>&1
		[ $rc -eq 0 ] || { cat /tmp/ic.out; fail "itrace_icount $sec exit $rc"; }
		swtrace get /tmp/ic.nrm2 >/dev/null 2>&1 || fail "swtrace get"
		rm -rf /tmp/icout
		mkdir -p /tmp/icout
		post -r /tmp/ic.nrm2 -itrace -o /tmp/icout >/tmp/post.out 2>&1 || { cat /tmp/post.out; fail "post"; }
		u=$(sed -n 's/.*: \([0-9]*\) instructions,.*/\1/p' /tmp/icout/itrace.out | head -1)
		line=$(grep '^icount: ' /tmp/ic.out)
		echo "  $line post-instructions ${u:-?} (try $try)"
		set -- $line
		# icount: NAME expect E instructions I span S traps T trap_tsc X
		#   syscalls Y sys_tsc Z interrupts A irq_tsc B faults C fault_tsc D reps R
		name=$2 expect=$4 mins=$6 span=$8 traps=${10} trap_tsc=${12} syscalls=${14} sys_tsc=${16}
		irqs=${18} irq_tsc=${20} faults=${22} fault_tsc=${24} reps=${26}
		signals=${28} sig_tsc=${30}
		[ "$irqs" = 0 ] && break
		# a run hit by one interrupt and nothing else: its glue, for information
		[ "$irqs" = 1 ] && [ "$syscalls" = 0 ] && [ "$faults" = 0 ] &&
			echo "$name $((span - (u - 1) - (trap_tsc + sys_tsc + irq_tsc + fault_tsc))) $traps" >>/tmp/irqtries
		[ $try -lt 8 ] || fail "section $name: an interrupt in each of $try runs"
	done
	if [ -n "$ICOUNT_SHOW" ]; then
		post -r /tmp/ic.nrm2 -show -o /tmp/icout >/dev/null 2>&1
		grep -a 'ITRACE' /tmp/icout/post.show | grep -v 'ITRACE_THREAD' | head -60 | sed 's/^/  show: /'
	fi
	[ -n "$u" ] || fail "section $name: no instruction count from post"
	[ "$u" = "$mins" ] || fail "section $name: the trace holds $u user instructions, the module counted $mins"
	[ "$reps" = 0 ] || fail "section $name: rep string instructions (callgrind's +1) in a section"
	r=$((span - (u - 1) - (trap_tsc + sys_tsc + irq_tsc + fault_tsc + sig_tsc)))
	eval "${name}_u=$u ${name}_expect=$expect ${name}_r=$r ${name}_traps=$traps ${name}_sys=$syscalls ${name}_faults=$faults ${name}_span=$span"
	eval "${name}_sigs=$signals ${name}_w=$((trap_tsc + sys_tsc + irq_tsc + fault_tsc + sig_tsc))"
}

for s in nops200 nops400 sys fault sig mix popf; do
	step "section $s"
	section $s
done

# the trace's user instructions against what each section holds, a priori
# (popf: code that clears TF itself is stepped on, not left untraced)
for s in nops200 nops400 sys fault sig mix popf; do
	eval "u=\$${s}_u e=\$${s}_expect"
	[ "$u" = "$e" ] || fail "section $s: ITrace counted $u user instructions; the section has $e"
done
echo "vmtest: every section's user instructions in the trace = the count known from its code (nops 205, 405; sys 45; fault 37; sig $sig_u; mix $mix_u; popf, which clears TF itself, 18)"

[ "$nops200_sys" = 0 ] && [ "$nops400_sys" = 0 ] && [ "$nops200_faults" = 0 ] && [ "$nops400_faults" = 0 ] ||
	fail "the nop sections had system calls or faults: $nops200_sys $nops200_faults $nops400_sys $nops400_faults"
dt=$((nops400_traps - nops200_traps))
dr=$((nops400_r - nops200_r))
[ $dt -gt 0 ] || fail "the nop sections' traps: $nops200_traps, $nops400_traps"
G=$((dr / dt))
[ $((G * dt)) = $dr ] || fail "the trap glue is not a constant: $dr instructions over $dt more traps"
C=$((nops200_r - nops200_traps * G))
[ "$sys_sys" -gt 0 ] || fail "section sys: no system call recorded"
S=$(((sys_r - sys_traps * G - C) / sys_sys))
[ $((S * sys_sys)) = $((sys_r - sys_traps * G - C)) ] || fail "the system call glue is not a constant: $((sys_r - sys_traps * G - C)) over $sys_sys calls"
[ "$fault_faults" -gt 0 ] || fail "section fault: no page fault recorded"
F=$(((fault_r - fault_traps * G - C) / fault_faults))
[ $((F * fault_faults)) = $((fault_r - fault_traps * G - C)) ] || fail "the page-fault glue is not a constant: $((fault_r - fault_traps * G - C)) over $fault_faults faults"
# A signal's delivery sometimes takes a slower path of the kernel's once
# (seen once in many runs: 33,609 over 10 signals where 10 x 2,909 is the
# rule, sig_tsc up by 6,335): the section is run again, three times at most.
for sgtry in 1 2 3; do
	[ "$sig_sigs" -gt 0 ] || fail "section sig: no signal delivery recorded"
	sgr=$((sig_r - sig_traps * G - sig_sys * S - C))
	Sg=$((sgr / sig_sigs))
	[ $((Sg * sig_sigs)) = $sgr ] && break
	[ $sgtry -lt 3 ] || fail "the signal glue is not a constant: $sgr over $sig_sigs signals ($sgtry runs)"
	echo "vmtest: the signal glue is not a constant: $sgr over $sig_sigs signals; section sig again"
	section sig
	[ "$sig_u" = "$sig_expect" ] || fail "section sig: ITrace counted $sig_u user instructions; the section has $sig_expect"
done
echo "vmtest: glue no module point sees, measured under -icount: $G instructions per single-step trap (the #DB entry to the notifier and the return after it), $S per system call, $F per page fault, $Sg per signal delivered (outside signal_deliver..frame set up), $C at the span's ends"

# the interrupt's glue (entry up to its tracepoint, less the trap it
# replaces) from the calibration runs an interrupt hit: informational, the
# mixed section is run again until no interrupt hits it
if [ -s /tmp/irqtries ]; then
	is=$(while read -r n r t; do echo $((r - t * G - C)); done </tmp/irqtries | tr '\n' ' ')
	echo "vmtest: glue per interrupt, from the $(grep -c . /tmp/irqtries) calibration runs one hit (informational): $is"
fi
[ "$mix_sys" = 4 ] && [ "$mix_faults" = 2 ] && [ "$mix_sigs" = 1 ] || fail "section mix: $mix_sys system calls, $mix_faults faults, $mix_sigs signals recorded; want 4 (getppid, gettid, tkill, rt_sigreturn), 2 and 1"
pred=$((mix_traps * G + mix_sys * S + mix_faults * F + mix_sigs * Sg + C))
echo "vmtest: identity (mix): TSC span $mix_span = user $((mix_u - 1)) + kernel measured $mix_w + glue $mix_traps traps x $G + $mix_sys x $S + $mix_faults x $F + $mix_sigs x $Sg + $C = $((mix_u - 1 + mix_w + pred))"
[ "$mix_r" = "$pred" ] || fail "identity off by $((mix_r - pred)) instructions: TSC span $mix_span, user $((mix_u - 1)), kernel measured $mix_w, glue $pred (R = $mix_r)"
echo "vmtest: identity exact: user instructions traced + kernel instructions = the TSC delta of the traced section"

# What an ITrace costs threads it does not trace: page faults of another
# process, without and with an ITrace session on (a sleeping process
# selected: the probes are attached); the least of three runs each.
touchmin() {
	best=
	for i in 1 2 3; do
		itrace_icount touch >/tmp/t.out 2>&1 || { cat /tmp/t.out; fail "itrace_icount touch"; }
		t=$(sed -n 's/^touch: \([0-9]*\) ticks.*/\1/p' /tmp/t.out)
		[ -z "$best" ] || [ "$t" -lt "$best" ] && best=$t
	done
	echo "$best"
}
step "the cost for threads not traced: 256 page faults of another process"
a=$(touchmin)
sleep 1000 &
sl=$!
swtrace init -t 1M -m 1M >/dev/null 2>&1 && swtrace disable tprof >/dev/null 2>&1 && swtrace on --discard >/dev/null 2>&1 || fail "swtrace on"
swtrace itrace on -p $sl >/tmp/out 2>&1 || { cat /tmp/out; fail "itrace on -p (sleeping)"; }
b=$(touchmin)
swtrace itrace off >/dev/null 2>&1
swtrace off >/dev/null 2>&1
kill $sl
echo "vmtest: untraced page faults: $((a / 256)) instructions each with no ITrace, $((b / 256)) with an ITrace on elsewhere (+$(((b - a) / 256)) per fault, informational)"
echo "PITRACE-ICOUNT-PASS"
