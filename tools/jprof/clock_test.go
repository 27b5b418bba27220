package jprof_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"perfinsp/internal/testenv"
	"perfinsp/internal/tracetest"
)

// buildAgentTest compiles tools/jprof/testdata/NAME.c (which includes the
// agent's writer) and returns the program's path.
func buildAgentTest(t *testing.T, name string) string {
	t.Helper()
	root := tracetest.Root()
	if _, err := exec.LookPath("gcc"); err != nil {
		testenv.Missing(t, "gcc is not installed (apt-get install build-essential)")
	}
	bin := filepath.Join(t.TempDir(), name)
	cc := exec.Command("gcc", "-O2", "-Wall", "-Werror", "-pthread", "-Itools/jprof/agent", "-Ilibperfutil/c",
		"-Ilibperfutil/c/include", "-o", bin, "tools/jprof/testdata/"+name+".c", "libperfutil/c/agentconn.c")
	cc.Dir = root
	if out, err := cc.CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	return bin
}

// The agent's writer across changes of the time's high half: for every
// piece of a chunk the sender could send, the TIME_HIGH in force at its
// end (from the owner's last one's offset, or read from the records when
// a newer one came) is what reading the chunk from its start gives, and
// the record count taken from the published word is the records' count.
func TestTraceChunkTimeHigh(t *testing.T) {
	out, err := exec.Command(buildAgentTest(t, "jthigh")).CombinedOutput()
	t.Logf("%s", out)
	var pieces, fast, read, bad int
	if _, perr := fmt.Sscanf(lastLine(string(out)), "pieces %d fast %d read %d bad %d", &pieces, &fast, &read, &bad); perr != nil {
		t.Fatalf("jthigh said %q (%v): %v", out, err, perr)
	}
	if err != nil || bad != 0 || fast == 0 || read == 0 {
		t.Fatalf("%d of %d pieces wrong (%d by the offset, %d by reading): %v", bad, pieces, fast, read, err)
	}
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	return s[strings.LastIndexByte(s, '\n')+1:]
}

// The agent's trace records are timed by the TSC where the kernel's clock
// source is the TSC (a read and a multiplication, not clock_gettime per
// record): every record's time lies between CLOCK_MONOTONIC read just
// before and just after it (1 µs of slack), and never goes back, both
// at the writer's own TSC read and at one the caller passes.
func TestTraceRecordClock(t *testing.T) {
	out, err := exec.Command(buildAgentTest(t, "jtclock")).CombinedOutput()
	t.Logf("%s", out)
	var tsc, n, conv, outside, back, worst int64
	if _, perr := fmt.Sscanf(string(out), "tsc %d records %d converted %d outside %d backwards %d worst %d",
		&tsc, &n, &conv, &outside, &back, &worst); perr != nil {
		t.Fatalf("jtclock said %q (%v): %v", out, err, perr)
	}
	if err != nil || outside != 0 || back != 0 {
		t.Fatalf("%d of %d records outside their clock reads (worst by %d ns), %d went back: %v", outside, n, worst, back, err)
	}
	cs, _ := os.ReadFile("/sys/devices/system/clocksource/clocksource0/current_clocksource")
	if strings.TrimSpace(string(cs)) == "tsc" {
		// the rate is known 10 ms in; from then on records are converted
		if tsc != 1 || conv < n/2 {
			t.Fatalf("clock source tsc, but %d of %d records were timed by the TSC", conv, n)
		}
	} else if conv != 0 {
		t.Fatalf("clock source %q, yet %d records were timed by the TSC", strings.TrimSpace(string(cs)), conv)
	} else {
		t.Logf("clock source %q: every record read the clock (the TSC's path is not exercised here)", strings.TrimSpace(string(cs)))
	}
}
