# Trace facility foundation: short fuzz runs over the record and file readers
# (records; header, chunks and salvage; what post reads, kallsyms included),
# the benchmark, and the demo (main job on the bundled example). New
# interesting inputs are minimized briefly (a number of runs, not a time: a
# time-bounded minimization still under way when -fuzztime ends is reported
# by go test as "context deadline exceeded", a failure that is none). The
# runs are bounded by a number of inputs, not a time, for the same reason:
# Go 1.26's fuzz coordinator can report its own -fuzztime deadline as a
# failure ("context deadline exceeded", no crasher) on a loaded machine
# (golang/go#75804, fixed in 1.27); a count has no deadline. 100,000 inputs
# take seconds.
FUZZTIME ?= 100000x
FUZZMINTIME ?= 100x
FUZZFLAGS = -run '^$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME)
.PHONY: fuzz demo bench-tprof
fuzz:
	$(GO) test $(FUZZFLAGS) -fuzz FuzzReader ./format/trace/
	$(GO) test $(FUZZFLAGS) -fuzz FuzzParse ./format/nrm2/
	$(GO) test $(FUZZFLAGS) -fuzz FuzzReport ./tools/post/
TEST_TARGETS += fuzz

bench-tprof: build
	bash bench/tprof-overhead.sh
bench: bench-tprof

# The tprof agent's own CPU per sample, RSS and losses beside perf record
# (bash bench/tprof-agent.sh [SECS] [RUNS] [RATE] [EXTRA]).
.PHONY: bench-tprof-agent
bench-tprof-agent: build
	bash bench/tprof-agent.sh
bench: bench-tprof-agent

# The scheduler records (dispatch, wake-ups, the stacks of waits) under a
# context-switch-heavy load, beside perf sched record and perf record -g.
.PHONY: bench-offcpu
bench-offcpu: build
	bash bench/offcpu.sh
bench: bench-offcpu

demo: build
	scripts/run.tprof -- $(BIN)/cpuburn

# The continuous agent's cost beside perf record -a -g on a busy machine.
.PHONY: bench-continuous
bench-continuous: build
	bash bench/continuous.sh
bench: bench-continuous
