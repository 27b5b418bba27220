#!/bin/sh
# Runs inside the VM (busybox sh), from scripts/vmtest/guest/test.sh: JIT records through
# the module. jitprog copies a hot loop into anonymous
# executable memory and names it with JProf's client (PITRACE_IOC_JIT);
# tprof of it through the module must name the loop's ticks by that name,
# and a JIT_LOAD of another process over the same range (its child's
# "Forged.name") must carry the child's pid, not the parent's.
. /guest/lib.sh
FAIL_PREFIX="jit: "

step "jit: JIT_LOAD refused while tracing is off"
swtrace free >/dev/null 2>&1
if jitprog 0 >/tmp/out 2>&1; then
	cat /tmp/out
	fail "jitprog's records were accepted with tracing off"
fi
sed 's/^/  /' /tmp/out

step "jit: tprof of a hot loop in anonymous memory named by JIT_LOAD"
run swtrace init -t 2M -m 256K
run swtrace enable tprof
run swtrace setrate 1000
run swtrace on
run jitprog 3
pid=$(sed -n 's/^jitprog: pid \([0-9]*\) .*/\1/p' /tmp/out)
[ -n "$pid" ] || fail "jitprog printed no pid"
run swtrace off
run swtrace get /tmp/jit.nrm2
run swtrace free
[ -x /bin/post ] || fail "no /bin/post in the guest: the JIT names cannot be checked"
rm -rf /tmp/jit && mkdir -p /tmp/jit/nomaps
(post -r /tmp/jit.nrm2 -o /tmp/jit --perfmap-dir /tmp/jit/nomaps --pid "$pid" -tprof -show >/tmp/jit/post.log 2>&1) ||
	{ cat /tmp/jit/post.log; fail "post"; }
grep JIT_ /tmp/jit/post.show | head -8 | sed 's/^/  /'
awk '/^\)\) Module_Symbol/ {on=1} on && NF' /tmp/jit/tprof.out | head -8 | sed 's/^/  /'
first=$(awk '/^\)\) Module_Symbol/ {on=1} on && $1 == "SYM" {print; exit}' /tmp/jit/tprof.out)
echo "vmtest: jit: first symbol row of Module_Symbol: $first"
echo "$first" | grep -q JitHot.spin || fail "tprof.out does not name the JIT loop JitHot.spin first"
grep -q Forged.name /tmp/jit/tprof.out && fail "the child's forged name landed on the parent's ticks"
own=$(grep JIT_LOAD /tmp/jit/post.show | grep JitHot.spin | head -1)
forged=$(grep JIT_LOAD /tmp/jit/post.show | grep Forged.name | head -1)
[ -n "$own" ] && [ -n "$forged" ] || fail "post.show lacks the JIT_LOAD records"
echo "$own" | grep -qw "$pid" || fail "the JIT_LOAD of JitHot.spin does not carry pid $pid"
echo "$forged" | grep -qw "$pid" && fail "the child's JIT_LOAD carries the parent's pid $pid"
echo "vmtest: jit: ticks named JitHot.spin, the child's record has its own pid"
sh /guest/method.sh || fail "method entry/exit records (scripts/vmtest/guest/method.sh)"
exit 0
