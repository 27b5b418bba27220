# Call flows (docs/callflow.md): the hook library bin/libhookit.so (the
# -finstrument-functions entry/exit runtime, with libperfutil's PTT read
# compiled in with initial-exec TLS so the read is no call to
# __tls_get_addr), the bundled example built with -finstrument-functions,
# the tests (Go: analysis/callflow, tools/hookit) and the benchmark.
CC ?= gcc
HOOKIT_CFLAGS := -O2 -g -Wall -Wextra -Werror -fPIC -ftls-model=initial-exec \
	-fno-instrument-functions -Ilibperfutil/c/include -Ilibperfutil/c/hookit
CALLFLOW_EXAMPLE_CFLAGS := -O1 -g -fno-inline -fno-optimize-sibling-calls \
	-finstrument-functions -Wall -Werror -pthread

.PHONY: hookit callflow-test bench-callflow vmtest-callflow
build: hookit
hookit: $(BIN)/libhookit.so $(BIN)/libhookit.a $(BIN)/callflow $(BIN)/callflow_api $(BIN)/callflow_exc

build/hookit/%.o: libperfutil/c/%.c libperfutil/c/include/perfutil.h
	@mkdir -p $(dir $@)
	$(CC) $(HOOKIT_CFLAGS) -c -o $@ $<

# libperfutil's PTT states come from the runtime's own mappings, never the
# program's allocator (hk_malloc, hk_calloc, hk_free in hookit.c).
build/hookit/ptt.o: libperfutil/c/ptt.c libperfutil/c/include/perfutil.h
	@mkdir -p $(dir $@)
	$(CC) $(HOOKIT_CFLAGS) -Dmalloc=hk_malloc -Dcalloc=hk_calloc -Dfree=hk_free -c -o $@ $<

build/hookit/hookit.o: libperfutil/c/hookit/hookit.c libperfutil/c/hookit/hookit.h libperfutil/c/hookit/hookit_api.h libperfutil/c/include/perfutil.h
	@mkdir -p $(dir $@)
	$(CC) $(HOOKIT_CFLAGS) -c -o $@ $<

build/hookit/calib.o: libperfutil/c/hookit/calib.c libperfutil/c/hookit/hookit.h libperfutil/c/hookit/hookit_api.h
	@mkdir -p $(dir $@)
	$(CC) $(filter-out -fno-instrument-functions,$(HOOKIT_CFLAGS)) -O1 -fno-inline -finstrument-functions -c -o $@ $<

$(BIN)/libhookit.so: build/hookit/hookit.o build/hookit/calib.o build/hookit/ptt.o
	@mkdir -p $(BIN)
	$(CC) -shared -pthread -Wl,-soname,libhookit.so -o $@ $^

# The same objects (PIC) for static linking: into an agent .so (jprof) or a
# static program (the -icount VM's guest).
$(BIN)/libhookit.a: build/hookit/hookit.o build/hookit/calib.o build/hookit/ptt.o
	@mkdir -p $(BIN)
	rm -f $@
	$(AR) rcs $@ $^

$(BIN)/callflow: examples/callflow.c
	@mkdir -p $(BIN)
	$(CC) $(CALLFLOW_EXAMPLE_CFLAGS) -o $@ $<

# C++ exceptions through instrumented frames (g++ calls the exit hooks of
# the frames it unwinds) and through a C frame built without -fexceptions
# (its exit hook is skipped: the stack repair closes it).
CXX ?= g++
build/hookit/callflow_exc.o: examples/callflow_exc.cc
	@mkdir -p $(dir $@)
	$(CXX) $(filter-out -pthread,$(CALLFLOW_EXAMPLE_CFLAGS)) -c -o $@ $<
build/hookit/callflow_exc_c.o: examples/callflow_exc_c.c
	@mkdir -p $(dir $@)
	$(CC) $(filter-out -pthread,$(CALLFLOW_EXAMPLE_CFLAGS)) -c -o $@ $<
$(BIN)/callflow_exc: build/hookit/callflow_exc.o build/hookit/callflow_exc_c.o
	@mkdir -p $(BIN)
	$(CXX) -o $@ $^

# An agent-like user of the in-process API (hookit_api.h), linked, not preloaded.
$(BIN)/callflow_api: examples/callflow_api.c libperfutil/c/hookit/hookit_api.h $(BIN)/libhookit.so
	$(CC) -O1 -g -Wall -Werror -pthread -Ilibperfutil/c/hookit -o $@ $< -L$(BIN) -lhookit -Wl,-rpath,'$$ORIGIN'

callflow-test: hookit
	$(GO) build -ldflags '$(LDVERSION)' -o $(BIN)/ ./tools/hookit ./tools/rtdriver
	$(GO) test -count=1 -v ./analysis/callflow/ ./tools/hookit/ ./tools/rtdriver/

bench-callflow: hookit
	bash bench/callflow.sh
bench: bench-callflow

# Exactness in the -icount VM (scripts/vmtest/run.sh callflow): the
# calibrated per-function figures of examples/callflow_exact.c (module metric
# tsc = instructions) against the ITrace of the same binary with its hooks
# not recording (taken on the host: the slow part, a few minutes).
vmtest-callflow: hookit
	bash scripts/vmtest/run.sh callflow
VM_TEST_TARGETS += vmtest-callflow

# The thread-file decoder against arbitrary bytes (FUZZTIME: mk/post.mk).
.PHONY: fuzz-callflow
fuzz: fuzz-callflow
fuzz-callflow:
	$(GO) test -run '^$$' -fuzz '^FuzzParseThread$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 100x ./analysis/callflow/
