# Trace facility foundation: short fuzz runs over the record and file readers
# (records; header, chunks and salvage; what post reads, kallsyms included),
# the benchmark, and the demo (main job on the bundled example). New
# interesting inputs are minimized briefly so that a short run keeps fuzzing.
FUZZTIME ?= 10s
FUZZMINTIME ?= 1s
FUZZFLAGS = -run '^$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME)
.PHONY: fuzz demo bench-tprof
fuzz:
	$(GO) test $(FUZZFLAGS) -fuzz FuzzReader ./libperfutil/trace/
	$(GO) test $(FUZZFLAGS) -fuzz FuzzParse ./libperfutil/nrm2/
	$(GO) test $(FUZZFLAGS) -fuzz FuzzReport ./tools/post/
TEST_TARGETS += fuzz

bench-tprof: build
	bash bench/tprof-overhead.sh
bench: bench-tprof

demo: build
	scripts/run.tprof -- $(BIN)/cpuburn
