# The kernel-module VM test: boots Debian's kernel under QEMU (TCG, -smp 2)
# with the module, the static tools and the guest tests (scripts/vmtest/).
# Under CI=true a missing dependency fails; elsewhere it skips with the reason.
.PHONY: vmtest vmtest-bench
vmtest:
	bash scripts/vmtest/run.sh
TEST_TARGETS += vmtest

# Per-record cost of the module's tprof and TraceHook paths against perf's
# ring buffer, in guest instructions (-icount shift=0,sleep=off).
vmtest-bench:
	bash bench/kmod/record-cost.sh
bench: vmtest-bench
