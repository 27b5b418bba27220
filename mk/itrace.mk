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
