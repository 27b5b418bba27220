# hotspot: the hot-spot walk (tools/hotspot, libperfutil/uprobe,
# examples/hotspot.c; docs/hotspot.md). Tests need root (uprobes).
CC ?= gcc
HOTSPOT_CFLAGS := -O2 -g -fno-omit-frame-pointer -fno-optimize-sibling-calls -Wall -Werror

.PHONY: hotspottest bench-hotspot
build: $(BIN)/hotspot-example

$(BIN)/hotspot: $(wildcard tools/hotspot/*.go libperfutil/uprobe/*.go internal/perfring/*.go)
	@mkdir -p $(BIN)
	$(GO) build -ldflags '$(LDVERSION)' -o $(BIN)/ ./tools/hotspot

$(BIN)/hotspot-example: examples/hotspot.c
	@mkdir -p $(BIN)
	$(CC) $(HOTSPOT_CFLAGS) -o $@ $<

hotspottest: $(BIN)/hotspot-example
	$(GO) test -count=1 -v ./internal/perfring/ ./libperfutil/uprobe/ ./tools/hotspot/

bench-hotspot:
	bash bench/hotspot.sh
bench: bench-hotspot

# The example built for run.hookit (bench/hotspot.sh: full entry/exit instrumentation).
$(BIN)/hotspot-example-hookit: examples/hotspot.c
	@mkdir -p $(BIN)
	$(CC) $(HOTSPOT_CFLAGS) -finstrument-functions -o $@ $<
