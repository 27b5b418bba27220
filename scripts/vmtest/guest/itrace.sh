#!/bin/sh
# Runs inside the VM (run.sh itrace): ITrace through the pitrace module.
# Expected counts come from the host (scripts/vmtest/host/itrace-prep.sh: callgrind of the same
# static binaries, in /bin/*.cg). Each check prints one "vmtest:" line.
. /guest/lib.sh
FAIL_TRACE_OFF=1
N=${ITRACE_N:-3000}
# trace_from_exec CMD...: CMD traced through the module from its exec
# (started stopped before it, ITrace on at exec, continued); sets $child
trace_from_exec() {
	start_stopped "$@"
	run swtrace itrace on --at-exec -p "$child"
	kill -CONT "$child"
}

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
ins=$(sed -n 's/.*: \([0-9]*\) instructions,.*/\1/p' /tmp/itout/itrace.out | head -1)
sed -n '1,12p' /tmp/itout/itrace.out | sed 's/^/  /'
echo "vmtest: itrace module: ${ins:-?} instructions traced in $((t1 - t0)) ms wall (TCG)"
step "itrace: interrupts and page faults in user code are one record each, not branches (the counts above stayed exact)"
run post -r /tmp/it.nrm2 -arc -o /tmp/itout
nirq=$(grep -c ' INTERRUPT_236_[0-9]*ns' /tmp/itout/arc)
npf=$(grep -c ' PAGEFAULT_0x[0-9a-f]*_err[0-9]*_[0-9]*ns' /tmp/itout/arc)
grep ' INTERRUPT_\| IRQ_\| PAGEFAULT_' /tmp/itout/arc | head -4 | sed 's/^/  /'
set -- $(sed -n 's/^kernel: \([0-9]*\) interrupts and \([0-9]*\) page faults.*/\1 \2/p' /tmp/itout/itrace.out)
[ "$nirq" -gt 0 ] || fail "no local timer interrupt (vector 236) in the arc report of a traced run of $((t1 - t0)) ms"
[ "$npf" -gt 0 ] || fail "no page fault in the arc report of a traced static program from its exec"
nall=$(grep -c ' INTERRUPT_\| IRQ_' /tmp/itout/arc)
[ "${1:-x}" = "$nall" ] && [ "${2:-x}" = "$npf" ] || fail "itrace.out counts ${1:-?} interrupts, ${2:-?} faults; the arc report $nall, $npf"
echo "vmtest: itrace kernel entries: $nall interrupts ($nirq local timer), $npf page faults, each one arc line; the own functions' counts above are callgrind's"
step "itrace: block-stepping: the default mode found this CPU's BTF ignored (TCG) and single-stepped: the counts above were exact"
dmesg | grep -q 'pitrace: itrace: this CPU ignores BTF' ||
	fail "no 'this CPU ignores BTF' kernel message after the default-mode trace: $(dmesg | grep 'pitrace: itrace' | tail -2)"
echo "vmtest: itrace auto mode: $(dmesg | grep -m1 'pitrace: itrace: this CPU' | sed 's/^\[[ 0-9.]*\] //'), callgrind exact"

step "itrace: block-stepping verify: the example single-stepped, the block decoder run at every taken branch agrees"
dmesg -c >/dev/null
run swtrace init -t 32M -m 2M
run swtrace on --discard
start_stopped /bin/itrace "$N"
run itrace_block on verify "$child"
kill -CONT "$child"
wait "$child" || fail "the example traced in verify mode exited $?"
run swtrace off
run swtrace get /tmp/iv.nrm2
mkdir -p /tmp/ivout
run post -r /tmp/iv.nrm2 -itrace --callgrind /tmp/iv.cg -o /tmp/ivout
run pitest itrace-cmp /bin/itrace.cg /tmp/iv.cg
# one line a thread: tid T: I instructions, B blocks checked, D disagreements,
# R lines not block-steppable, K traps if block-stepped
dmesg | grep 'pitrace: itrace verify: tid' | sed 's/^\[[ 0-9.]*\] /  /'
set -- $(dmesg | sed -n 's/.*itrace verify: tid [0-9]*: \([0-9]*\) instructions, \([0-9]*\) blocks checked, \([0-9]*\) disagreements, \([0-9]*\) lines not block-steppable, \([0-9]*\) traps if block-stepped, \([0-9]*\) taken branches/\1 \2 \3 \4 \5 \6/p' |
	awk '{ i += $1; b += $2; d += $3; r += $4; k += $5; t += $6; n++ } END { print n + 0, i + 0, b + 0, d + 0, r + 0, k + 0, t + 0 }')
vthreads=$1 vins=$2 vblocks=$3 vdis=$4 vref=$5 vtraps=$6 vbr=$7
[ "$vthreads" -ge 2 ] || fail "verify: $vthreads thread lines in the kernel log, want the example's 2 threads"
[ "$vdis" = 0 ] || fail "verify: $vdis disagreements between the block decoder and single-stepping: $(dmesg | grep 'itrace verify:' | grep -v blocks | head -3)"
[ "$vblocks" -gt "$N" ] || fail "verify: only $vblocks blocks checked, want more than the $N leaf calls"
dmesg | grep -q 'pitrace: itrace: .*not on the line\|no branch from' && fail "verify: the kernel log has a block error: $(dmesg | grep 'pitrace: itrace' | tail -2)"
echo "vmtest: itrace verify: $vblocks blocks checked (> $N), 0 disagreements, $vref lines left to single-step; callgrind exact"
echo "vmtest: itrace traps on the example: single-step $vins, block-stepped (where BTF is honoured) $vtraps ($(awk -v a="$vins" -v b="$vtraps" 'BEGIN { printf "%.1f", a / b }')x fewer); $vbr taken branches (one trap each if every line could be block-stepped: $(awk -v a="$vins" -v b="$vbr" 'BEGIN { printf "%.1f", a / b }')x)"

step "itrace: step modes on one fixed section (ITRACE_STATS): the same instructions single, verify and auto"
run swtrace init -t 8M -m 1M
run swtrace on --discard
for m in single verify auto; do
	run itrace_block self "$m"
	eval "$m=\"$(sed -n 's/.* instructions \([0-9]*\) .*/\1/p' /tmp/out)\""
	eval "${m}_line=\"$(cat /tmp/out)\""
done
[ -n "$single" ] && [ "$single" = "$verify" ] && [ "$single" = "$auto" ] ||
	fail "the section traced $single instructions single-stepped, $verify in verify mode, $auto in auto mode"
set -- $verify_line
# itrace_block: MODE instructions I traps T blocks B disagreements D block_traps K refused R step S btf_ignored X
[ "$8" -gt 0 ] && [ "${10}" = 0 ] && [ "${16}" = 16 ] || fail "verify section: blocks ${8:-?} disagreements ${10:-?} step ${16:-?}: $verify_line"
set -- $auto_line
[ "${18}" = 1 ] && [ "${16}" = 0 ] || fail "auto section: btf_ignored ${18:-?} step ${16:-?}, want 1 and 0 under TCG: $auto_line"
set -- $single_line
[ "$8" = 0 ] && [ "${16}" = 8 ] || fail "single section: blocks ${8:-?} step ${16:-?}: $single_line"
run swtrace off
run swtrace free
echo "vmtest: itrace step modes: $single instructions in each; verify checked blocks with 0 disagreements; auto found BTF ignored"

step "itrace: post --itrace-folded / --itrace-pprof carry instructions"
run post -r /tmp/it.nrm2 --itrace-folded /tmp/it.folded --itrace-pprof /tmp/it.pb.gz -o /tmp/itout
sum=$(awk '{ s += $NF } END { print s }' /tmp/it.folded)
[ "$sum" = "$ins" ] || fail "the folded stacks sum to $sum instructions, itrace.out says $ins"
grep -q ';main;leaf_loop;leaf ' /tmp/it.folded || fail "no main;leaf_loop;leaf stack in the folded file"
[ -s /tmp/it.pb.gz ] || fail "no pprof profile"
echo "vmtest: folded stacks sum to the $ins traced instructions; $(grep -c . /tmp/it.folded) stacks; pprof $(stat -c %s /tmp/it.pb.gz) bytes"

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
for f in before_section after_section; do
	if grep -q "$f" /tmp/onoff.cg; then fail "$f is in the trace of ITraceOn/Off around traced_call"; fi
done
# main runs only its call of traced_call and of ITraceOff while traced
mainx=$(awk '$NF ~ /^main:/ { print $2 }' /tmp/onoff/itrace.out | head -1)
[ -n "$mainx" ] && [ "$mainx" -lt 20 ] || fail "main ran ${mainx:-?} instructions traced, want the few around the call"
echo "vmtest: ITraceOn/Off: traced_call exact, before_section and after_section absent, main $mainx instructions (its call and return)"

step "itrace: 200 signal handlers left by siglongjmp, traced from the exec: the program's functions = callgrind's"
run swtrace init -t 16M -m 1M
run swtrace on --discard
trace_from_exec /bin/itrace_edge 200
wait "$child" || fail "the traced itrace_edge exited $?"
run swtrace off
run swtrace get /tmp/sj.nrm2
mkdir -p /tmp/sjout
run post -r /tmp/sj.nrm2 -itrace --callgrind /tmp/sj.cg --itrace-folded /tmp/sj.folded -o /tmp/sjout
run pitest itrace-cmp /bin/itrace_edge.cg /tmp/sj.cg main jump_once handler in_handler after_jump
# the replay pops each handler it left (200 of them): after_jump runs at main's depth
grep -q ';main;after_jump ' /tmp/sj.folded && ! grep -q 'handler;.*after_jump ' /tmp/sj.folded || fail "no main;after_jump stack: the handlers left by siglongjmp stayed on the replay's stack ($(grep after_jump /tmp/sj.folded | head -1 | cut -c1-200))"
echo "vmtest: siglongjmp out of 200 handlers: main, jump_once, handler, in_handler, after_jump = callgrind; after_jump at main's depth"

# itrace off must let the thread go (TF cleared, no more traps): traced,
# 10^8 spins (6*10^8 instructions) take half an hour and more; untraced a few s
run swtrace init -t 16M -m 1M
for mode in after in; do
	step "itrace: itrace off with a handler left by siglongjmp ($mode): the process goes on untraced"
	run swtrace on --discard
	rm -f /tmp/sj.ready
	trace_from_exec /bin/itrace_edge "$mode" /tmp/sj.ready 100000000
	wait_until 60 test -e /tmp/sj.ready || fail "itrace_edge $mode did not reach its spin"
	run swtrace itrace off -p "$child"
	grep -q " 1 threads," /tmp/out || fail "itrace off did not stop itrace_edge's thread: $(cat /tmp/out)"
	o0=$(uptime_ms)
	wait_until 120 sh -c "! kill -0 $child" || fail "itrace_edge $mode still stepped after itrace off (a handler left by siglongjmp)"
	wait "$child" || fail "itrace_edge $mode exited $?"
	echo "vmtest: itrace off, handler left by siglongjmp ($mode): 6*10^8 instructions untraced in $(($(uptime_ms) - o0)) ms"
	run swtrace off
done

# read_counts ARC: the instruction counts of read_raw's read (SYSCALL_0)
# records in the arc report (an interrupt or fault record inside a read's
# block splits it: its count belongs to the block the SYSCALL record ends)
read_counts() {
	grep ' read_raw:' "$1" | awk '/ (INTERRUPT|IRQ|PAGEFAULT)_/ { acc += $4; next }
	/ SYSCALL_0 / { printf "%s ", acc + $4; acc = 0; next } { acc = 0 }'
}

step "itrace: a read restarted after SIGSTOP/SIGCONT: its syscall counted once, as callgrind"
rm -f /tmp/edge.fifo
mkfifo /tmp/edge.fifo
run swtrace on --discard
trace_from_exec /bin/itrace_edge restart /tmp/edge.fifo
# blocked in read_raw's read of fd 3, stopped, continued, blocked again
inread() { grep -q '^0 0x3 ' "/proc/$child/syscall" && grep -q '^State:.*S (sleeping)' "/proc/$child/status"; }
wait_until 60 inread || fail "itrace_edge restart did not block in its read"
kill -STOP "$child"
wait_until 10 stopped "$child" || fail "itrace_edge did not stop"
kill -CONT "$child"
wait_until 10 inread || fail "itrace_edge did not go back to its read after SIGCONT"
echo xy >/tmp/edge.fifo
wait "$child" || fail "itrace_edge restart exited $?"
run swtrace off
run swtrace get /tmp/edge.nrm2
mkdir -p /tmp/edgeout
run post -r /tmp/edge.nrm2 -itrace -arc --callgrind /tmp/edge.cg -o /tmp/edgeout
run pitest itrace-cmp /bin/itrace_edge_restart.cg /tmp/edge.cg main restart read_raw
# the records say what happened: the first read's record goes on at its own
# syscall instruction, the restarted read has a record of 0 instructions
reads=$(read_counts /tmp/edgeout/arc)
[ "$reads" = "3 0 3 " ] || fail "read_raw's read records have counts '$reads', want '3 0 3 ' (read, restart, read): $(grep ' read_raw:' /tmp/edgeout/arc)"
echo "vmtest: restarted read: read_raw's records count $reads(the restart 0), read_raw and its callers = callgrind"
run swtrace free

step "itrace: a read restarted after an SA_RESTART handler: its syscall counted again, as callgrind"
run swtrace init -t 8M -m 1M
run swtrace on --discard
trace_from_exec /bin/itrace_edge restart-handler
wait_until 60 inread || fail "itrace_edge restart-handler did not block in its read"
kill -USR2 "$child"
wait "$child" || fail "itrace_edge restart-handler exited $?"
run swtrace off
run swtrace get /tmp/rh.nrm2
mkdir -p /tmp/rhout
run post -r /tmp/rh.nrm2 -itrace -arc --callgrind /tmp/rh.cg -o /tmp/rhout
run pitest itrace-cmp /bin/itrace_edge_rh.cg /tmp/rh.cg main restart_handler read_raw feed_handler in_handler
reads=$(read_counts /tmp/rhout/arc)
# the handler's rt_sigreturn returns to the syscall instruction, which runs
# again: the machine and callgrind count it (unlike a restart without a
# handler, which valgrind does itself: 0 above)
[ "$reads" = "3 1 " ] || fail "read_raw's read records have counts '$reads', want '3 1 ' (read, the syscall run again after the handler): $(grep ' read_raw:' /tmp/rhout/arc)"
echo "vmtest: read restarted after a handler: read_raw's records count $reads(the re-run syscall 1), read_raw, the handler and callers = callgrind"
run swtrace free

step "itrace: ITraceOn/ITraceOff from Go (libperfutil/itrace) on the module"
run swtrace init -t 8M -m 1M
run swtrace on --discard
run env GODEBUG=asyncpreemptoff=1 pitest itrace-go
run swtrace off
run swtrace free

step "itrace: continuous mode with an ITrace several times the buffers: every record in the file or counted lost"
run swtrace init -t 64K -m 64K
run swtrace disable tprof
run swtrace mode cont -f /tmp/cont.nrm2
run swtrace on --discard
trace_from_exec /bin/itrace 100000000
# until the module has written four times what the buffers hold (28 bytes
# a branch record at least); the file's size says less: on a slow machine
# it grows by drained segments that are mostly empty
recs() { swtrace info | awk '$1 == "all" { print $2 }'; }
wait_until 240 sh -c "[ \$(swtrace info | awk '\$1 == \"all\" { print \$2 }') -gt $((4 * 2 * 65536 / 28)) ]" ||
	fail "the module did not write four buffers' worth of records ($(recs) written)"
run swtrace itrace off -p "$child"
written=$(sed -n 's/.* instructions, \([0-9]*\) records.*/\1/p' /tmp/out)
kill -KILL "$child"
wait "$child" 2>/dev/null
run swtrace off
run swtrace free
run swtrace mode normal
run swtrace enable tprof
run pitest itrace-count /tmp/cont.nrm2
set -- $(sed -n 's/itrace-count: records \([0-9]*\) lost \([0-9]*\)/\1 \2/p' /tmp/out)
infile=$1 clost=$2
# Every ITrace record missing from the file is counted lost; the lost
# count may also hold a few of the facility's own records (TRACE_OFF and
# segment time stamps of a full buffer), at most 4 per CPU.
missing=$(( ${written:-0} - ${infile:-0} ))
[ -n "$written" ] && [ "$missing" -ge 0 ] && [ "$missing" -le "$clost" ] && [ $((clost - missing)) -le 8 ] ||
	fail "the module wrote ${written:-?} ITrace records; the file holds $infile and counts $clost lost"
# more ITrace than the trace buffers hold (28 bytes a branch record at least)
[ $((infile * 28)) -gt $((2 * 65536)) ] || fail "only $infile ITrace records in the stream: not more than the buffers hold"
echo "vmtest: cont mode: the module wrote $written ITrace records: $infile in the $(stat -c %s /tmp/cont.nrm2)-byte stream, the $missing others counted among $clost lost"

step "itrace: a traced process killed mid-trace; itrace off from another shell; rmmod while tracing"
run swtrace init -t 64M -m 2M
run swtrace on --discard
trace_from_exec /bin/itrace 100000000
# traced from its exec on
wait_until 30 grep -qx itrace "/proc/$child/comm" || fail "the example did not exec"
if rmmod pitrace >/tmp/out 2>&1; then fail "rmmod succeeded while a thread is traced"; fi
echo "vmtest: rmmod while tracing refused: $(head -1 /tmp/out)"
kill -KILL "$child"
wait "$child" 2>/dev/null
echo "vmtest: killed mid-trace: reaped"
trace_from_exec /bin/itrace 100000000
wait_until 30 grep -qx itrace "/proc/$child/comm" || fail "the example did not exec"
# the exec is not the second thread: traced, the C library's start-up
# before pthread_create takes a while under TCG
threads() { ls "/proc/$child/task" | wc -l; }
wait_until 60 sh -c "[ \$(ls /proc/$child/task | wc -l) -ge 2 ]" ||
	fail "the example did not start its second thread ($(threads) threads)"
run swtrace itrace off -p "$child"
grep -q "2 threads" /tmp/out || fail "itrace off did not stop the example's two threads"
# untraced, 10^8 leaf calls take a few seconds of TCG; traced, hours
wait_until 120 sh -c "! kill -0 $child" || fail "the process did not finish at native speed after itrace off"
wait "$child" || fail "the process let go by itrace off exited $?"
echo "vmtest: itrace off from another shell: the process went on untraced and finished"
run swtrace off
run swtrace get /tmp/kill.nrm2
mkdir -p /tmp/killout
run post -r /tmp/kill.nrm2 -itrace -o /tmp/killout
sed -n '1p' /tmp/killout/itrace.out | sed 's/^/  /'

step "itrace: a normal-mode buffer filled by ITrace: tracing stops and the process is let go"
run swtrace init -t 64K -m 1M
run swtrace on --discard
trace_from_exec /bin/itrace 30000000
wait_until 120 sh -c "! kill -0 $child" || fail "the process was not let go when the buffer filled"
wait "$child" || fail "exit $?"
swtrace info | grep -i "full\|stopped" | head -2 | sed 's/^/  /'
run swtrace off
echo "vmtest: buffer full: the process finished untraced"

step "itrace: benchmark: the same example through pitraced's ptrace path in this VM"
# instructions/s while traced, from post's totals line of each trace
rate() { sed -n 's/.* \([0-9]*\) instructions\/s, \([0-9]*\) records\/s.*/\1 \2/p' "$1" | head -1; }
bpi() { sed -n 's/.*bytes: \([0-9.]*\) bytes per instruction.*/\1/p' "$1" | head -1; }
export PERFINSP_BACKEND=daemon
run swtrace init -t 32M -m 2M
run swtrace on --discard
start_stopped /bin/itrace "$N"
run swtrace itrace on --at-exec -p "$child"
p0=$(uptime_ms)
kill -CONT "$child"
wait "$child" || fail "the example traced by ptrace exited $?"
p1=$(uptime_ms)
run swtrace off
run swtrace get /tmp/pt.nrm2
unset PERFINSP_BACKEND
mkdir -p /tmp/ptout
run post -r /tmp/pt.nrm2 -itrace --callgrind /tmp/pt.cg -o /tmp/ptout
run pitest itrace-cmp /bin/itrace.cg /tmp/pt.cg
set -- $(rate /tmp/itout/itrace.out)
mrate=$1 mrec=$2
set -- $(rate /tmp/ptout/itrace.out)
prate=$1 prec=$2
[ -n "$mrate" ] && [ -n "$prate" ] && [ "$prate" -gt 0 ] || fail "no rates in post's totals"
echo "vmtest: itrace bench (TCG, same example, same VM): module $mrate instructions/s ($mrec records/s, $(bpi /tmp/itout/itrace.out) bytes/instruction, $((t1 - t0)) ms wall); ptrace $prate instructions/s ($prec records/s, $(bpi /tmp/ptout/itrace.out) bytes/instruction, $((p1 - p0)) ms wall); module/ptrace $(awk -v a="$mrate" -v b="$prate" 'BEGIN { printf "%.1f", a / b }')x"

step "itrace: ITRACE_ON racing exits (harden itraceexit, 300 processes)"
run harden itraceexit 300

step "itrace: rmmod after tracing"
wait_until 30 rmmod pitrace || fail "rmmod after ITrace"
insmod /pitrace.ko || fail "insmod again"
echo "PITRACE-ITRACE-DONE"
