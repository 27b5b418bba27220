# ITrace: the bundled example (examples/itrace.c, built as the tests build
# it: no inlining or sibling calls, so every call in the source is a call)
# and the benchmark. The ITrace tests are Go tests (make gotest): the
# tracer against callgrind, run.itrace, swtrace itrace, ITraceOn/Off in C
# (libperfutil/c/itrace.c, built into libperfutil.a/.so) and Go.
CC ?= gcc
ITRACE_CFLAGS := -O1 -g -fno-inline -fno-optimize-sibling-calls -Wall -Werror -pthread

.PHONY: bench-itrace
build: $(BIN)/itrace
$(BIN)/itrace: examples/itrace.c
	@mkdir -p $(BIN)
	$(CC) $(ITRACE_CFLAGS) -o $@ $< -lm

bench-itrace: build
	bash bench/itrace.sh
bench: bench-itrace

# The pitrace module's instruction decoder (kmod/pitrace_insn.c, used by the
# module's single-step ITrace) swept over libc and a Go binary against
# x86asm, the ptrace path's decoder. -count=1: the C file is outside the
# Go package, so Go's test cache would not see it change.
.PHONY: kitrace-insn-test
kitrace-insn-test:
	CGO_ENABLED=1 go test -count=1 ./libperfutil/kmodbackend/internal/insncheck/

# ITrace through the pitrace module in the VM (scripts/vmtest/run.sh itrace):
# the example against the host's callgrind of the same static binary,
# ITraceOn/Off, a killed process, itrace off from another shell, rmmod
# while tracing, a full buffer.
.PHONY: vmtest-itrace
# Most of its time is the ptrace path's part of the benchmark
# (~600 instructions/s under TCG): a longer timeout than the other modes.
vmtest-itrace:
	VMTEST_TIMEOUT=$${VMTEST_TIMEOUT:-1500} bash scripts/vmtest/run.sh itrace
VM_TEST_TARGETS += vmtest-itrace

# The ITrace -icount identity in the VM (scripts/vmtest/run.sh icount):
# user instructions traced + kernel instructions measured + the calibrated
# glue per trap, system call and fault = the TSC delta, exactly.
.PHONY: vmtest-itrace-icount
vmtest-itrace-icount:
	bash scripts/vmtest/run.sh icount
VM_TEST_TARGETS += vmtest-itrace-icount

# A short fuzz run of the ITrace replay (analysis/itrace: arbitrary
# record sequences through the replay, stacks and callgrind writer).
.PHONY: fuzz-itrace
fuzz: fuzz-itrace
fuzz-itrace:
	$(GO) test -run '^$$' -fuzz '^FuzzReplay$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 100x ./analysis/itrace/
