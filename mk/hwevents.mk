# Hardware-event tools: msr, mpevt, cpi and their event table
# (libperfutil/events). Their unit tests run in `gotest` (go test ./...);
# this adds the build without cgo (mpevt loads libpfm4 only through cgo and
# must build and run without it) and the mpevt-vs-perf-stat comparison
# with its figures printed, and short fuzz runs of the event parser. See docs/hwevents.md.
HWEVENTS_TOOLS := ./tools/msr ./tools/mpevt ./tools/cpi

.PHONY: hwevents-test hwevents-nocgo hwevents-fuzz
hwevents-nocgo:
	CGO_ENABLED=0 $(GO) build $(HWEVENTS_TOOLS)
	CGO_ENABLED=0 $(GO) vet $(HWEVENTS_TOOLS) ./libperfutil/events/ ./libperfutil/msr/

hwevents-test: hwevents-nocgo hwevents-fuzz
	$(GO) test -count=1 -v -run 'TestAgreesWithPerfStat|TestCTableAgreesWithEventTable|TestNoPMUOneLine' \
		./tools/mpevt/ ./libperfutil/ptt/ ./tools/cpi/

hwevents-fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime 100000x -fuzzminimizetime 100x ./libperfutil/events/
	$(GO) test -run '^$$' -fuzz '^FuzzParseFormat$$' -fuzztime 50000x -fuzzminimizetime 100x ./libperfutil/events/
TEST_TARGETS += hwevents-nocgo hwevents-fuzz
