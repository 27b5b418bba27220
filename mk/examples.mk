# The bundled example workload (C: it is the program being profiled).
CC ?= gcc
all: $(BIN)/cpuburn
build: $(BIN)/cpuburn
$(BIN)/cpuburn: examples/cpuburn.c
	@mkdir -p $(BIN)
	$(CC) -O2 -g -fno-omit-frame-pointer -Wall -Werror -pthread -o $@ $<
$(BIN)/static/cpuburn: examples/cpuburn.c
	@mkdir -p $(BIN)/static
	$(CC) -O2 -g -fno-omit-frame-pointer -static -Wall -Werror -pthread -o $@ $<
static: $(BIN)/static/cpuburn
