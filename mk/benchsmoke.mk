# Every benchmark once at its smallest size (scripts/bench-smoke.sh): each
# must run to its end (exit 0 within its time limit, the last line of its
# result table printed) and leave nothing behind. bench-smoke-vm runs the
# one that boots the kernel-module VM (bench/kmod/record-cost.sh); bench-ptt's
# VM part (scripts/vmtest/run.sh ptt) is in vmtest already.
.PHONY: bench-smoke bench-smoke-vm
bench-smoke: build
	bash scripts/bench-smoke.sh
TEST_TARGETS += bench-smoke

bench-smoke-vm:
	bash scripts/bench-smoke.sh --vm
VM_TEST_TARGETS += bench-smoke-vm
