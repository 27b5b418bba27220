#!/bin/sh
# Runs inside the VM (busybox sh), from scripts/vmtest/guest/jit.sh: JProf's method
# entry/exit records through the module (PITRACE_IOC_METHOD).
# methodprog drives the agent's record path as calltree,trace does
# (scripts/vmtest/progs/methodprog.c); with tprof ticks on, post --merge must give
# the expected merged tree: exact calls per path, the jitted method's ticks
# in its node, the interpreter's ticks in the interpreted method's node; the
# child's records under the child's pid. The same program through pitraced
# (PERFINSP_BACKEND=daemon) must give the same tree of calls.
. /guest/lib.sh
FAIL_PREFIX="method: "
# MS: each hot section spins this long (wall clock): 100 ms keeps Main.main
# over 50 ticks when a busy host gives the TCG vCPU a third of the time
N=10 MS=100 BENCH=5000

# tree PID FILE: the event nodes of PID's threads in merge.out as
# "main|thread path calls", sorted (sampled + nodes left out)
# merge.out's rows for awk: on (a thread of pid), who (main|thread),
# lvl and name (after the indent; names may hold spaces)
ROWS='
/^ Thread pid / { on = ($3 == pid); t = $5; sub(/:$/, "", t); who = (t == pid ? "main" : "thread"); next }
{ lvl = -1 }
$1 ~ /^[0-9]+$/ && NF >= 8 {
	lvl = $1; name = ""
	for (i = 8 + lvl; i <= NF; i++) name = name (name == "" ? "" : " ") $i
}
'
tree() {
	awk -v pid="$1" "$ROWS"'
	on && lvl > 0 && name !~ /^\+/ {
		path[lvl] = name; p = path[1]
		for (i = 2; i <= lvl; i++) p = p "/" path[i]
		print who, p, $3
	}' "$2" | sort
}

# trace BACKEND OUTDIR: methodprog under tprof with the method majors on
trace() {
	rm -rf "$2" && mkdir -p "$2"
	PERFINSP_BACKEND=$1 swtrace init -t 4M -m 512K >/tmp/out 2>&1 || { cat /tmp/out; fail "$1: init"; }
	run env PERFINSP_BACKEND="$1" swtrace enable tprof 0x30 0x50
	run env PERFINSP_BACKEND="$1" swtrace setrate 1000
	run env PERFINSP_BACKEND="$1" swtrace on
	run env PERFINSP_BACKEND="$1" methodprog $N $MS $BENCH
	pid=$(sed -n 's/^methodprog: pid \([0-9]*\) child \([0-9]*\) .*/\1/p' /tmp/out)
	child=$(sed -n 's/^methodprog: pid \([0-9]*\) child \([0-9]*\) .*/\2/p' /tmp/out)
	grep "cost:" /tmp/out | sed "s/^/vmtest: method: $1: /"
	[ -n "$pid" ] && [ -n "$child" ] || fail "$1: methodprog printed no pid"
	run env PERFINSP_BACKEND="$1" swtrace off
	run env PERFINSP_BACKEND="$1" swtrace get "$2/t.nrm2"
	run env PERFINSP_BACKEND="$1" swtrace free
	(post -r "$2/t.nrm2" -o "$2" --merge >"$2/post.log" 2>&1) || { cat "$2/post.log"; fail "$1: post --merge"; }
	echo "$pid $child" >"$2/pids"
}

if [ "$1" = bench ]; then	# run.sh bench: -icount, 1 ns of guest time = 1 instruction
	for b in kmod daemon; do
		step "method: cost of one method event on the calling thread, $b backend (-icount: ns = instructions)"
		run env PERFINSP_BACKEND=$b swtrace init -t 4M -m 512K
		run env PERFINSP_BACKEND=$b swtrace enable 0x30 0x50
		run env PERFINSP_BACKEND=$b swtrace on
		run env PERFINSP_BACKEND=$b methodprog 0 0 10001
		grep "cost:" /tmp/out | sed "s/^/vmtest: method bench: $b: /"
		run env PERFINSP_BACKEND=$b swtrace off
		run env PERFINSP_BACKEND=$b swtrace free
	done
	exit 0
fi

step "method: hardening: the argument at a page edge, bad pointers, sizes, reserved fields, a flood to full"
run harden method 20000

[ -x /bin/post ] || fail "no /bin/post in the guest: the merged trees cannot be checked"

step "method: events refused while tracing is off"
swtrace free >/dev/null 2>&1
if methodprog 1 1 1 >/tmp/out 2>&1; then
	cat /tmp/out
	fail "methodprog's records were accepted with tracing off"
fi
sed 's/^/  /' /tmp/out
grep -q "failed 3 err pitrace module: Invalid argument" /tmp/out || fail "not refused by the module with EINVAL"

step "method: methodprog's entry/exit through the module, tprof at 1000 Hz, post --merge"
trace kmod /tmp/mk
set -- $(cat /tmp/mk/pids)
pid=$1 child=$2
awk -v p="$pid" '/^ Thread pid / {on = ($3 == p)} on' /tmp/mk/merge.out | head -40 | sed 's/^/  /'
tree "$pid" /tmp/mk/merge.out >/tmp/mk/tree
tree "$child" /tmp/mk/merge.out >/tmp/mk/child
sort >/tmp/mk/want <<EOF
main Main.main 1
main Main.main/Work.outer $N
main Main.main/Work.outer/Work.hot $N
main Main.main/Work.outer/Work.cold $N
main Bench.empty $BENCH
thread Worker.run 1
thread Worker.run/Work.hot $((N / 2))
EOF
diff /tmp/mk/want /tmp/mk/tree || fail "kmod: the merged tree of pid $pid is not the program's calls (diff want got above)"
echo "main Forged.method 1" | diff - /tmp/mk/child || fail "kmod: the child's events are not under its own pid $child"
grep -q "Forged.method" /tmp/mk/tree && fail "kmod: the child's method landed in the parent's tree"
# ticks: the main thread's row of a path: Ticks ($6) and CumTk ($7)
row() {
	awk -v pid="$pid" -v want="$1" "$ROWS"'
	on && who == "main" && lvl >= 0 {
		path[lvl] = name; s = path[1]
		for (i = 2; i <= lvl; i++) s = s "/" path[i]
		if (lvl > 0 && s == want) { print $6, $7; exit }
	}' /tmp/mk/merge.out
}
set -- $(row Main.main)
main_cum=$2
set -- $(row Main.main/Work.outer/Work.hot)
hot=$1
set -- $(row Main.main/Work.outer/Work.cold)
cold=$1
echo "vmtest: method: kmod: Main.main $main_cum ticks, Work.hot $hot in its node, Work.cold $cold (the interpreter's)"
[ -n "$main_cum" ] && [ "$main_cum" -gt 50 ] || fail "kmod: Main.main has '$main_cum' ticks, want > 50 (tprof at 1000 Hz, ~$((N * MS * 5 / 4)) ms)"
[ $((hot * 100)) -ge $((main_cum * 60)) ] || fail "kmod: Work.hot holds $hot of Main.main's $main_cum ticks, want >= 60 % (4/5 of the time)"
[ "$cold" -gt 0 ] && [ $((cold * 100)) -ge $((main_cum * 5)) ] || fail "kmod: Work.cold holds $cold of $main_cum ticks: the interpreter's ticks are not given to the interpreted method"
bad=$(awk -v pid="$pid" "$ROWS"'on && (name == "+Interpreter" || name == "+Work.hot")' /tmp/mk/merge.out)
[ -z "$bad" ] || fail "kmod: sampled nodes that should have been the method's own: $bad"
anon=$(awk -v pid="$pid" "$ROWS"'on && name ~ /\/\/anon/ {n += $6} END {print n + 0}' /tmp/mk/merge.out)
[ "$anon" -eq 0 ] || fail "kmod: $anon ticks in the JIT code are not named (JIT_LOAD written after them?)"
echo "vmtest: method: kmod: the merged tree is the program's calls; ticks in Work.hot and (interpreter) Work.cold; the child's events carry its own pid"

step "method: the same program through pitraced (daemon backend): the same tree of calls"
trace daemon /tmp/md
set -- $(cat /tmp/md/pids)
tree "$1" /tmp/md/merge.out >/tmp/md/tree
tree "$2" /tmp/md/merge.out >/tmp/md/child
diff /tmp/mk/tree /tmp/md/tree || fail "the daemon backend's merged tree differs from the module's (diff kmod daemon above)"
diff /tmp/mk/child /tmp/md/child || fail "the daemon backend's child tree differs from the module's"
echo "vmtest: method: daemon backend: the same merged tree of calls as the module's"
exit 0
