# Trace facility foundation: short fuzz runs over the record and file readers,
# the benchmark, and the demo (main job on the bundled example).
FUZZTIME ?= 10s
.PHONY: fuzz demo bench-tprof
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzReader -fuzztime $(FUZZTIME) ./libperfutil/trace/
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime $(FUZZTIME) ./libperfutil/nrm2/
TEST_TARGETS += fuzz

bench-tprof: build
	bash bench/tprof-overhead.sh
bench: bench-tprof

demo: build
	scripts/run.tprof -- $(BIN)/cpuburn
