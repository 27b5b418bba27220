# post and A2N: benchmarks (agreement with perf, speed against perf report).
.PHONY: bench-post
bench-post: build
	bash bench/post/run.sh
bench: bench-post
# post vs perf report on real ~1 M-sample traces (records them once into
# /var/tmp/perfinsp-post-bench; perf report --children takes minutes).
.PHONY: bench-post-real
bench-post-real: build
	bash bench/post/real.sh -p 1
# post --timeline against post -tprof on the stacks traces of real.sh.
.PHONY: bench-post-timeline
bench-post-timeline: build
	bash bench/post/timeline.sh

# Short fuzz runs of A2N's parsers of untrusted inputs (perf maps, jitdump,
# ELF modules: symbols, PLT, .eh_frame, .gnu_debugdata). `fuzz` is in
# TEST_TARGETS (mk/swtrace.mk). Minimisation is bounded: the ELF seed is a
# whole vDSO image, and the default 60 s minimisation would eat the run.
FUZZTIME ?= 100000x
.PHONY: fuzz fuzz-a2n
fuzz: fuzz-a2n
fuzz-a2n:
	$(GO) test -run '^$$' -fuzz '^FuzzParsePerfMap$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 100x ./analysis/a2n/
	$(GO) test -run '^$$' -fuzz '^FuzzParseJitdump$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 100x ./analysis/a2n/
	$(GO) test -run '^$$' -fuzz '^FuzzParseJavaStacks$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 100x ./analysis/a2n/
	$(GO) test -run '^$$' -fuzz '^FuzzModule$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 100x ./analysis/a2n/

# A short fuzz run of the call-frame information reader (analysis/cfi:
# .eh_frame and .debug_frame of the profiled processes' files, read by
# a2n and by the root agent's unwinder).
.PHONY: fuzz-cfi
fuzz: fuzz-cfi
fuzz-cfi:
	$(GO) test -run '^$$' -fuzz '^FuzzCFI$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 100x ./analysis/cfi/

# The report's goroutines (readers, replay, side locator, namer, cells,
# writers) and A2N's Locates of several processes at once, under the race
# detector: a data race there is a wrong report only now and then.
.PHONY: race-post
race-post:
	$(GO) test -count=1 -race ./analysis/tprof/
	$(GO) test -count=1 -race -run 'Locate|PerfMap|Prefetch|Cache' ./analysis/a2n/
TEST_TARGETS += race-post
