#!/bin/bash
# VM test of the pitrace kernel module: boots Debian's kernel under QEMU
# (TCG, -smp 2) with a busybox initramfs holding the module, the static
# tools and the guest test program, and runs scripts/vmtest/guest/test.sh
# inside. Passes only if the serial log has the pass marker and no
# Oops / BUG: / WARNING: / Kernel panic.
#
# The harness by role: this script (the host side, one entry for every
# mode) and host/ (the preparation some modes need on the host); guest/
# (the busybox scripts run in the VM, there as /guest/); pitest/ (the Go
# checker run in the guest as /bin/pitest); progs/ (the C test programs).
#
#   scripts/vmtest/run.sh            the functional test
#   scripts/vmtest/run.sh bench      the per-record cost benchmark (-icount shift=0,sleep=off)
#   scripts/vmtest/run.sh ptt        PTT: virtualized vs raw TSC over a fixed loop (-icount)
#   scripts/vmtest/run.sh harden     only the hardening tests (scripts/vmtest/progs/harden.c, -smp 2)
#   scripts/vmtest/run.sh itrace     ITrace through the module (scripts/vmtest/guest/itrace.sh)
#   scripts/vmtest/run.sh callflow   call-flow exactness against callgrind (-icount; scripts/vmtest/guest/callflow.sh)
#   scripts/vmtest/run.sh icount     ITrace: user + kernel instructions = TSC delta (-icount; scripts/vmtest/guest/icount.sh)
#   scripts/vmtest/run.sh stacks     only the call-stack tests (scripts/vmtest/pitest/stacks.go, -smp 2)
#   scripts/vmtest/run.sh offcpu     only the scheduler records: wake-ups and the stacks of waits
#                                    (scripts/vmtest/pitest/offcpu.go, examples/waits.c, -smp 2)
#   scripts/vmtest/run.sh jit        only the JIT-record test (scripts/vmtest/guest/jit.sh, jitprog.c;
#                                    method events: scripts/vmtest/guest/method.sh, methodprog.c)
#
# Environment: CI=true turns a missing dependency into a failure (else a
# skip with the reason); VMTEST_TIMEOUT (seconds, default 900: a guard against a
# hung guest, not a measure — TCG beside a busy host lane is several times slower
# than on a quiet machine); KVER to
# pick a headers version; VMTEST_KEEP=1 keeps the work directory.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
WHAT=${1:-test}
# The modes, one row each: the guest script (scripts/vmtest/guest/), whether the
# VM counts instructions (-icount shift=0,sleep=off, one vCPU: the guest
# TSC counts instructions), the host preparation it needs (prep_MODE
# below, if any), and the line in the serial log that says it passed.
#        mode       guest script          icount  pass marker
MODES='
	test       test.sh               no      PITRACE-VMTEST-PASS
	robust     test.sh               no      vmtest: --- a process killed
	bench      test.sh               yes     PITRACE-BENCH-DONE
	ptt        test.sh               yes     PITRACE-PTT-DONE
	harden     test.sh               no      PITRACE-HARDEN-DONE
	itrace     test.sh               no      PITRACE-ITRACE-DONE
	stacks     test.sh               no      PITRACE-STACKS-DONE
	offcpu     test.sh               no      PITRACE-OFFCPU-DONE
	jit        test.sh               no      PITRACE-JIT-DONE
	callflow   callflow.sh           yes     PITRACE-CALLFLOW-PASS
	icount     icount.sh             yes     PITRACE-ICOUNT-PASS
'
row=$(printf '%s\n' "$MODES" | awk -v m="$WHAT" '$1 == m {print; exit}')
if [ -z "$row" ]; then
	echo "vmtest: unknown mode $WHAT: one of$(printf '%s\n' "$MODES" | awk 'NF {printf " %s", $1}')" >&2
	exit 2
fi
read -r _ GUEST ICOUNT MARKER <<<"$row"
W=$ROOT/build/vm
mkdir -p "$W"
LOG=$W/serial-$WHAT.log
# One run at a time per worktree (several developers may run make test).
# (The host preparation steps run with 9>&-: a pitraced they start, which
# outlives them, must not inherit the lock and hold it for its idle time.)
exec 9>"$W/.lock"
if command -v flock >/dev/null && ! flock -w 900 9; then
	echo "vmtest: FAIL: another VM test holds $W/.lock for 15 minutes" >&2
	exit 1
fi

skip_or_fail() {
	if [ "${CI:-}" = true ]; then
		echo "vmtest: FAIL: $*" >&2
		exit 1
	fi
	echo "vmtest: SKIP: $* (set CI=true to make this a failure)"
	exit 0
}

# ---- dependencies (scripts/deps/vm.txt; make deps installs them) ----
missing=()
command -v qemu-system-x86_64 >/dev/null || missing+=(qemu-system-x86)
[ -x /bin/busybox ] || missing+=(busybox-static)
command -v cpio >/dev/null || missing+=(cpio)
command -v xz >/dev/null || missing+=(xz-utils)
command -v gcc >/dev/null || missing+=(gcc)
ls -d /usr/src/linux-headers-*-amd64 >/dev/null 2>&1 || missing+=(linux-headers-amd64)
if [ ${#missing[@]} -gt 0 ]; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
		echo "vmtest: installing ${missing[*]}"
		DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >"$W/apt.log" 2>&1 ||
			{ apt-get update >/dev/null 2>&1 || true
			  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >>"$W/apt.log" 2>&1 ||
				skip_or_fail "cannot install ${missing[*]} (see $W/apt.log)"; }
	else
		skip_or_fail "missing ${missing[*]} and not root to install them"
	fi
fi
if ! /bin/busybox true; then
	skip_or_fail "busybox does not run"
fi
if ldd /bin/busybox >/dev/null 2>&1; then
	skip_or_fail "/bin/busybox is dynamically linked: install busybox-static"
fi

KVER=${KVER:-$(ls -d /usr/src/linux-headers-*-amd64 | sed 's|.*/linux-headers-||' | sort -V | tail -1)}
KDIR=/usr/src/linux-headers-$KVER
echo "vmtest: kernel $KVER"

# ---- the kernel image, unpacked (no initramfs-tools / postinst churn) ----
KROOT=$W/kroot-$KVER
if [ ! -e "$KROOT/boot/vmlinuz-$KVER" ]; then
	deb=$(ls "$W"/linux-image-"${KVER}"_*.deb 2>/dev/null | head -1 || true)
	if [ -z "$deb" ]; then
		(cd "$W" && apt-get download "linux-image-$KVER" >"$W/download.log" 2>&1) ||
			{ apt-get update >>"$W/download.log" 2>&1 || true
			  (cd "$W" && apt-get download "linux-image-$KVER" >>"$W/download.log" 2>&1); } ||
			skip_or_fail "cannot download linux-image-$KVER (see $W/download.log)"
		deb=$(ls "$W"/linux-image-"${KVER}"_*.deb | head -1)
	fi
	rm -rf "$KROOT"
	dpkg-deb -x "$deb" "$KROOT"
fi
# The uncompressed kernel boots faster: find the xz stream in the bzImage.
VMLINUX=$W/vmlinux-$KVER
if [ ! -s "$VMLINUX" ]; then
	off=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$KROOT/boot/vmlinuz-$KVER" | head -1 | cut -d: -f1 || true)
	if [ -n "$off" ]; then
		tail -c +$((off + 1)) "$KROOT/boot/vmlinuz-$KVER" | xz -dc >"$VMLINUX.tmp" 2>/dev/null || true
		if [ "$(head -c4 "$VMLINUX.tmp" | od -An -tx1 | tr -d ' ')" = 7f454c46 ]; then
			mv "$VMLINUX.tmp" "$VMLINUX"
		else
			rm -f "$VMLINUX.tmp"
		fi
	fi
fi
KERNEL=$KROOT/boot/vmlinuz-$KVER
[ -s "$VMLINUX" ] && KERNEL=$VMLINUX

# ---- build: module, static tools, guest test program ----
echo "vmtest: building the module against $KDIR"
make -s -C kmod KDIR="$KDIR" >"$W/kmod-build.log" 2>&1 || { cat "$W/kmod-build.log"; echo "vmtest: FAIL: module build" >&2; exit 1; }
BIN=$W/bin
rm -rf "$BIN"
mkdir -p "$BIN"
echo "vmtest: building static tools"
export CGO_ENABLED=0
go build -ldflags='-s -w' -o "$BIN/swtrace" ./tools/swtrace
# the agent: it drains wrap/cont traces and holds ptt (started on demand from $PATH)
go build -ldflags='-s -w' -o "$BIN/pitraced" ./daemon/cmd/pitraced
go build -ldflags='-s -w' -o "$BIN/pitest" ./scripts/vmtest/pitest
# post is part of every mode's checks (tprof reports, JIT names, method trees, ITrace against
# callgrind): a tree where it does not build fails here rather than running fewer checks.
if ! go build -ldflags='-s -w' -o "$BIN/post" ./tools/post 2>"$W/post-build.log"; then
	cat "$W/post-build.log" >&2
	echo "vmtest: FAIL: tools/post does not build (log: $W/post-build.log)" >&2
	exit 1
fi
gcc -O2 -g -fno-omit-frame-pointer -static -Wall -Werror -pthread -o "$BIN/cpuburn" examples/cpuburn.c
gcc -O2 -g -fno-omit-frame-pointer -static -Wall -Werror -o "$BIN/stackprog" scripts/vmtest/progs/stackprog.c
gcc -O2 -g -fno-omit-frame-pointer -fno-optimize-sibling-calls -static -Wall -Werror -pthread -o "$BIN/waits" examples/waits.c
gcc -O2 -g -fno-omit-frame-pointer -static -Wall -Werror -pthread -o "$BIN/pingpong" scripts/vmtest/progs/pingpong.c
gcc -O2 -static -Wall -Werror -pthread -o "$BIN/ptt" scripts/vmtest/progs/ptt.c
gcc -O2 -static -Wall -Werror -pthread -o "$BIN/harden" scripts/vmtest/progs/harden.c
gcc -O2 -static -Wall -Werror -pthread -Itools/jprof/agent -Ilibperfutil/c -Ilibperfutil/c/include -o "$BIN/jitprog" \
	scripts/vmtest/progs/jitprog.c tools/jprof/agent/jittrace.c libperfutil/c/agentconn.c
gcc -O2 -static -Wall -Werror -pthread -Itools/jprof/agent -Ilibperfutil/c -Ilibperfutil/c/include -o "$BIN/methodprog" \
	scripts/vmtest/progs/methodprog.c tools/jprof/agent/jittrace.c libperfutil/c/agentconn.c
gcc -O2 -static -Wall -Werror -pthread -Ilibperfutil/c/include -o "$BIN/ptt_ctest_kmod" \
	libperfutil/c/test/ptt_kmod_test.c libperfutil/c/*.c -lm
go build -ldflags='-s -w' -o "$BIN/ptt-tool" ./tools/ptt
# The modes' own host preparation.
prep_itrace() { # ITrace through the module: static examples and callgrind's counts of them
	set +e
	bash scripts/vmtest/host/itrace-prep.sh "$BIN" "$W" "${ITRACE_N:-3000}" 9>&-
	local r=$?
	set -e
	[ $r -eq 3 ] && exit 0 # skipped: no valgrind (said why)
	[ $r -eq 0 ] || { echo "vmtest: FAIL: itrace host preparation" >&2; exit 1; }
}
prep_icount() { # the ITrace -icount identity
	gcc -O2 -static -mno-red-zone -Wall -Werror -Ikmod/uapi -o "$BIN/itrace_icount" scripts/vmtest/progs/itrace_icount.c
}
prep_callflow() { # call-flow exactness
	CGO_ENABLED= bash scripts/vmtest/host/callflow-prep.sh "$BIN" "${CALLFLOW_N:-1000}" 9>&- || { echo "vmtest: FAIL: callflow build" >&2; exit 1; }
}
if declare -F "prep_$WHAT" >/dev/null; then
	"prep_$WHAT"
fi

# ---- initramfs ----
IR=$W/initramfs
rm -rf "$IR"
mkdir -p "$IR"/{bin,sbin,proc,sys,dev,tmp,mnt,root}
cp /bin/busybox "$IR/bin/busybox"
for a in $(/bin/busybox --list); do
	[ -e "$IR/bin/$a" ] || ln -s busybox "$IR/bin/$a"
done
cp kmod/pitrace.ko "$IR/pitrace.ko"
cp "$BIN"/* "$IR/bin/"
# The guest scripts (scripts/vmtest/guest/) are /guest/ in the VM.
cp -r scripts/vmtest/guest "$IR/guest"
cat >"$IR/init" <<EOF
#!/bin/busybox sh
export PATH=/bin PERFINSP_BACKEND=auto HOME=/root
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp
mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null
hostname pitrace-vm
cd /root
sh /guest/$GUEST $WHAT
echo "vmtest: guest script exit \$?"
poweroff -f
EOF
chmod +x "$IR/init"
(cd "$IR" && find . | cpio -o -H newc --quiet | gzip -1) >"$W/initramfs.cpio.gz"

# ---- boot ----
QEMU_EXTRA=()
SMP=2
if [ "$ICOUNT" = yes ]; then
	# -icount: the guest TSC counts instructions. With -icount the second
	# vCPU never comes up (the boot stops at "Booting SMP configuration"),
	# so the benchmark runs on one CPU.
	QEMU_EXTRA=(-icount shift=0,sleep=off)
	SMP=1
fi
TIMEOUT=${VMTEST_TIMEOUT:-900}
# The strict kernel: any WARN, oops, soft lockup or hung task panics (and
# fails the run); SLUB red zones, poisoning and sanity checks catch
# use-after-free and overruns of the module's allocations; freed pages are
# poisoned.  VMTEST_KCMD replaces it (for example to bisect a slowdown).
# no_timer_check: the boot's check that the timer interrupt arrives through
# the IO-APIC counts ticks over a few ms of emulated time; a TCG vCPU on a
# busy host gets too few and the kernel panics ("IO-APIC + timer doesn't
# work!"), as virtual machines commonly boot with it.
KCMD=${VMTEST_KCMD:-oops=panic panic_on_warn=1 softlockup_panic=1 softlockup_all_cpu_backtrace=1 hung_task_panic=1 slub_debug=FZP page_poison=1}
echo "vmtest: booting (TCG, -smp $SMP ${QEMU_EXTRA[*]}, timeout ${TIMEOUT}s; kernel: $KCMD); serial log $LOG"
start=$(date +%s)
set +e
timeout "$TIMEOUT" qemu-system-x86_64 -accel tcg,thread=${VMTEST_TCG_THREAD:-single} -cpu max -m 1G -smp $SMP -nographic -no-reboot \
	"${QEMU_EXTRA[@]}" -kernel "$KERNEL" -initrd "$W/initramfs.cpio.gz" \
	-append "console=ttyS0 panic=-1 no_timer_check $KCMD quiet loglevel=${VMTEST_LOGLEVEL:-5}" </dev/null >"$LOG" 2>&1
rc=$?
set -e
echo "vmtest: qemu exit $rc after $(($(date +%s) - start)) s"
grep -E '^(vmtest|itrace|ptt|harden|check-tprof|modes|badinput|fuzz|toggle|bench|swtrace|post|holdmap|pitest|stacks|offcpu|  )' "$LOG" | sed 's/\r$//' || true
# Kernel messages carry a printk time stamp; tool output in the log (for
# example post's "WARNING: records were lost") does not.
KPAT='\[ *[0-9]+\.[0-9]+\] .*(Oops|BUG:|WARNING:|Kernel panic|general protection|Call Trace)'
bad=$(grep -nE "$KPAT" "$LOG" || true)
if [ -n "$bad" ]; then
	echo "vmtest: FAIL: the kernel complained:" >&2
	grep -nE -B5 -A30 "$KPAT" "$LOG" | head -80 >&2
	exit 1
fi
if [ $rc -eq 124 ]; then
	echo "vmtest: FAIL: timed out after ${TIMEOUT}s (tail of $LOG):" >&2
	tail -30 "$LOG" >&2
	exit 1
fi
marker=$MARKER
if ! grep -q "$marker" "$LOG"; then
	echo "vmtest: FAIL: no pass marker $marker in $LOG (tail):" >&2
	tail -40 "$LOG" >&2
	exit 1
fi
echo "vmtest: PASS ($WHAT)"
