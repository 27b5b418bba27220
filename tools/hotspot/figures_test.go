package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"perfinsp/internal/testenv"
)

var cpuRE = regexp.MustCompile(`iterations=(\d+) calls hot=(\d+) .* cpu_us=(\d+)`)

// TestTimePerCallMatchesKnownCost: the example's hot() with WORK 20000 is
// a loop of known cost: callgrind shows it is all of an iteration's
// instructions (the rest of the loop is a few calls) and a fixed count per
// call, so an uninstrumented run's CPU time per iteration is hot's cost per
// call. Walked with -m task-clock and the probes always in place (a probed
// call costs the target more than the call itself here), hot's CPU time
// per call, the probes' own time taken out, is within 10 % of it (its mean
// or its median: on a loaded machine interrupts and steal time add a tail
// to the walked calls, which pass through the kernel twice each), while
// the same figure with the probes' time left in is not. The reference run and
// the walk are compared in the same attempt (a busy machine disturbs one
// moment, not the other): up to 3 attempts.
func TestTimePerCallMatchesKnownCost(t *testing.T) {
	build(t)
	need(t, "valgrind")
	need(t, "callgrind_annotate")
	dir := t.TempDir()
	cg := filepath.Join(dir, "cg.out")
	out, err := exec.Command("valgrind", "--tool=callgrind", "--callgrind-out-file="+cg, tools.example, "0.5", "20000").Output()
	m := cpuRE.FindStringSubmatch(string(out))
	if m == nil {
		t.Fatalf("callgrind run: %v, output %q", err, out)
	}
	calls, _ := strconv.ParseFloat(m[2], 64)
	ann, err := exec.Command("callgrind_annotate", "--inclusive=yes", "--threshold=100", cg).Output()
	if err != nil {
		t.Fatalf("callgrind_annotate: %v", err)
	}
	ir := map[string]float64{}
	for _, l := range strings.Split(string(ann), "\n") {
		f := strings.Fields(l)
		if len(f) < 3 {
			continue
		}
		n, err := strconv.ParseFloat(strings.ReplaceAll(f[0], ",", ""), 64)
		if err != nil {
			continue
		}
		for _, fn := range []string{"hot", "main"} {
			if strings.HasSuffix(f[len(f)-2], ":"+fn) && ir[fn] == 0 {
				ir[fn] = n
			}
		}
	}
	if ir["hot"] == 0 || ir["main"] == 0 || ir["hot"] < 0.99*ir["main"] {
		t.Fatalf("callgrind: hot %.0f of main's %.0f instructions: want hot to be the loop's whole cost\n%s", ir["hot"], ir["main"], ann)
	}
	t.Logf("callgrind: hot executes %.0f instructions per call, %.2f%% of main's", ir["hot"]/calls, 100*ir["hot"]/ir["main"])

	testenv.Retry(t, 3, "time per call against the known cost", func(a *testenv.Attempt) {
		out, err := exec.Command(tools.example, "2", "20000").Output()
		m := cpuRE.FindStringSubmatch(string(out))
		if m == nil {
			t.Fatalf("reference run: %v, output %q", err, out)
		}
		iters, _ := strconv.ParseFloat(m[1], 64)
		cpu, _ := strconv.ParseFloat(m[3], 64)
		ref := cpu * 1e3 / iters
		js := filepath.Join(t.TempDir(), "r.json")
		wout, err := walkExample(t, js, "-q", "-s", "0.5", "-m", "task-clock", "--period", "1500ms", "--depth", "1", "--max-overhead", "0",
			"--json", js, "-o", os.DevNull, "--", tools.example, longRun, "20000")
		if !isExit(err, 3) {
			t.Fatalf("hotspot: %v, output %q", err, wout)
		}
		r := readReport(t, js)
		hot := funcByLevel(r, 0)["hot"]
		if hot == nil || hot.Returns < minPairs || hot.FewPairs {
			t.Fatalf("hot %+v: want it measured over many pairs", hot)
		}
		cal := r.Overhead.Calibration
		raw := hot.MetricMean + cal.InPairNs // the task-clock with the pair's own probe time left in
		t.Logf("reference %.1f us of CPU per call; walked: task-clock/call mean %.1f us (median %.1f, %d pairs), %.1f us with the probes' own time (%.1f us per pair; a probed call costs %.1f us), wall mean %.1f median %.1f",
			ref/1e3, hot.MetricMean/1e3, hot.MetricMedian/1e3, hot.Returns, raw/1e3, cal.InPairNs/1e3, cal.CallNs/1e3, hot.MeanNs/1e3, hot.MedianNs/1e3)
		within := func(v float64) bool { return v >= 0.9*ref && v <= 1.1*ref }
		if !within(hot.MetricMean) && !within(hot.MetricMedian) {
			a.Errorf("hot's CPU time per call: mean %.1f us, median %.1f us; want one within 10%% of the known %.1f us", hot.MetricMean/1e3, hot.MetricMedian/1e3, ref/1e3)
		}
		if raw <= 1.1*ref {
			a.Errorf("with the probes' own time hot's CPU per call is %.1f us, within 10%% of %.1f us: the probes cost too little here for the test to tell", raw/1e3, ref/1e3)
		}
	})
}
