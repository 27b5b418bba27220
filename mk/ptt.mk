# PTT: the C library of libperfutil (static and shared), its C test, the Go
# package and the ptt tool tests, and the read benchmark.
CC ?= gcc
PTT_CFLAGS := -O2 -g -Wall -Wextra -Werror -fPIC -Ilibperfutil/c/include
PTT_CSRC   := $(wildcard libperfutil/c/*.c)
PTT_COBJ   := $(patsubst libperfutil/c/%.c,build/libperfutil-c/%.o,$(PTT_CSRC))

.PHONY: ptttest ptt-ctest ptt-gotest bench-ptt libperfutil-c
build: libperfutil-c
libperfutil-c: $(BIN)/libperfutil.a $(BIN)/libperfutil.so

build/libperfutil-c/%.o: libperfutil/c/%.c libperfutil/c/include/perfutil.h
	@mkdir -p $(dir $@)
	$(CC) $(PTT_CFLAGS) -c -o $@ $<

$(BIN)/libperfutil.a: $(PTT_COBJ)
	@mkdir -p $(BIN)
	rm -f $@
	ar rcs $@ $^

$(BIN)/libperfutil.so: $(PTT_COBJ)
	@mkdir -p $(BIN)
	$(CC) -shared -pthread -Wl,-soname,libperfutil.so -o $@ $^

$(BIN)/ptt_ctest: libperfutil/c/test/ptt_test.c libperfutil/c/test/check.h $(BIN)/libperfutil.a
	$(CC) -O2 -g -Wall -Wextra -Werror -pthread -Ilibperfutil/c/include -o $@ $< $(BIN)/libperfutil.a -lm

$(BIN)/ptt_ctest_so: libperfutil/c/test/ptt_test.c libperfutil/c/test/check.h $(BIN)/libperfutil.so
	$(CC) -O2 -g -Wall -Wextra -Werror -pthread -Ilibperfutil/c/include -o $@ $< -L$(BIN) -lperfutil -Wl,-rpath,'$$ORIGIN' -lm

ptt-ctest: $(BIN)/ptt_ctest $(BIN)/ptt_ctest_so
	$(BIN)/ptt_ctest
	$(BIN)/ptt_ctest_so

ptt-gotest:
	$(GO) build -ldflags '$(LDVERSION)' -o $(BIN)/ ./tools/ptt
	$(GO) test -count=1 -v ./libperfutil/ptt/ ./tools/ptt/

ptttest: ptt-ctest ptt-gotest
TEST_TARGETS += ptt-ctest

bench-ptt: $(BIN)/ptt_ctest
	PTT_BENCH_VM=1 bash bench/ptt/run.sh
bench: bench-ptt
