# The kernel-module VM tests: boot Debian's kernel under QEMU (TCG) with the
# module, the static tools and the guest tests (scripts/vmtest/): the
# functional and hardening tests on 2 vCPUs, then PTT under -icount
# shift=0,sleep=off (guest TSC = instructions: exact counts, the 0.01 %
# spread target). The guest kernel panics on any WARN, oops, soft lockup
# or hung task and runs slub_debug=FZP page_poison=1 (run.sh: KCMD).
# `bash scripts/vmtest/run.sh harden` runs only the hardening tests.
# Under CI=true a missing dependency fails; elsewhere it skips with the reason.
.PHONY: vmtest vmtest-bench
vmtest:
	bash scripts/vmtest/run.sh
	bash scripts/vmtest/run.sh ptt
VM_TEST_TARGETS += vmtest

# Per-record cost of the module's tprof and TraceHook paths against perf's
# ring buffer, in guest instructions (-icount shift=0,sleep=off).
vmtest-bench:
	bash bench/kmod/record-cost.sh
bench: vmtest-bench
