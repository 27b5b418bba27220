package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"perfinsp/libperfutil/events"
)

// TestMetricPerCall: -m task-clock reads the thread's CPU time at entry and
// return of every probed call. In the example's "sleepy" mode c() sleeps
// 200 us after each hot(): c's wall time per call is hot's plus the sleep,
// its task-clock is hot's CPU time only; hot's task-clock is at most its
// wall time.
func TestMetricPerCall(t *testing.T) {
	build(t)
	dir := t.TempDir()
	js, txt := filepath.Join(dir, "r.json"), filepath.Join(dir, "r.txt")
	out, err := walkExample(t, js, "-q", "-s", "0.5", "-m", "task-clock", "--period", "150", "--depth", "2", "--max-overhead", "0",
		"--json", js, "-o", txt, "--", tools.example, longRun, "200000", "sleepy")
	if !isExit(err, 3) || allRE.FindString(out) == "" {
		t.Fatalf("exit %v, output %q: want the example's line and exit 3", err, out)
	}
	r := readReport(t, js)
	b, _ := os.ReadFile(txt)
	t.Logf("report:\n%s", b)
	if r.Metric != "task-clock" || !strings.Contains(string(b), "task-clock/call mean") {
		t.Fatalf("metric %q: want task-clock in the JSON and the text", r.Metric)
	}
	hot, c := funcByLevel(r, 0)["hot"], funcByLevel(r, 1)["c"]
	if hot == nil || c == nil || hot.Returns < 50 || c.Returns < 30 {
		t.Fatalf("hot %+v, c %+v: want both measured over many calls", hot, c)
	}
	for _, f := range []*FuncStat{hot, c} {
		if f.MetricMean <= 0 || float64(f.MetricMin) > f.MetricMean || float64(f.MetricMax) < f.MetricMean {
			t.Errorf("%s: task-clock/call min %d mean %.0f max %d: want 0 < min <= mean <= max", f.Name, f.MetricMin, f.MetricMean, f.MetricMax)
		}
	}
	if hot.MetricMean > 1.02*hot.MeanNs {
		t.Errorf("hot: task-clock/call %.0f ns above its wall time/call %.0f ns", hot.MetricMean, hot.MeanNs)
	}
	if c.MeanNs-c.MetricMean < 150e3 {
		t.Errorf("c: wall time/call %.0f ns, task-clock/call %.0f ns: want the 200 us sleep in the wall time only", c.MeanNs, c.MetricMean)
	}
	if c.MetricMean < 0.5*hot.MetricMean || c.MetricMean > hot.MetricMean+150e3 {
		t.Errorf("c: task-clock/call %.0f ns, hot's %.0f ns: want about hot's CPU time (c's own work is a few instructions)", c.MetricMean, hot.MetricMean)
	}
}

// TestMetricNeedsItsCounter: a hardware metric on a machine without a PMU
// is refused before anything starts, saying so and what to use instead; an
// unknown event is refused too. Where a PMU exists, -m instructions counts
// at least the hot loop's iterations per call of hot.
func TestMetricNeedsItsCounter(t *testing.T) {
	build(t)
	out, err := exec.Command(tools.hotspot, "-m", "no-such-event", "-p", "1").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "unknown event") {
		t.Errorf("-m no-such-event: exit %v, %q: want exit 2 naming the unknown event", err, out)
	}
	if !events.HasPMU() {
		out, err := exec.Command(tools.hotspot, "-m", "instructions", "--", tools.example, "1").CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "no hardware PMU") ||
			!strings.Contains(string(out), "-m task-clock") || strings.Contains(string(out), "hotspot-example:") {
			t.Fatalf("-m instructions without a PMU: exit %v, %q: want exit 2 before the target starts, saying there is no PMU and what to use", err, out)
		}
		t.Logf("no hardware PMU here: %s", strings.TrimSpace(string(out)))
		return
	}
	js := filepath.Join(t.TempDir(), "r.json")
	out, err = exec.Command(tools.hotspot, "-q", "-s", "0.5", "-m", "instructions", "--period", "100", "--depth", "1", "--json", js, "-o", os.DevNull, "--", tools.example, "3").Output()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 {
		t.Fatalf("-m instructions: exit %v, %q", err, out)
	}
	hot := funcByLevel(readReport(t, js), 0)["hot"]
	if hot == nil || hot.MetricMean < 200000 {
		t.Fatalf("hot %+v: want at least 200000 instructions per call (its loop)", hot)
	}
}

// TestSamplingStretchesForAStarvedTarget: a target that runs too little in
// the sampling time for minSamples samples (here -s 0.02, the example's
// "sleepy" mode: a 200 us sleep after each hot(), some 10 samples in the
// first 50 ms drain of the rings) is sampled on until it has them, and
// the report says it sampled longer than asked.
func TestSamplingStretchesForAStarvedTarget(t *testing.T) {
	build(t)
	js := filepath.Join(t.TempDir(), "r.json")
	out, err := walkExample(t, js, "-q", "-s", "0.02", "--depth", "1", "--period", "100", "--max-overhead", "0",
		"--json", js, "-o", os.DevNull, "--", tools.example, longRun, "200000", "sleepy")
	if !isExit(err, 3) {
		t.Fatalf("exit %v, output %q: want the example's exit 3", err, out)
	}
	r := readReport(t, js)
	stretched := false
	for _, n := range r.Notes {
		stretched = stretched || strings.HasPrefix(n, "sampled ") && strings.Contains(n, "ran too little")
	}
	t.Logf("%d samples in %.2f s; notes %q", r.Sample.Samples, r.Sample.Seconds, r.Notes)
	// (On a machine too busy to give it minSamples of CPU in ten times
	// -s, the sampling ends there.)
	if r.Sample.Samples < minSamples && r.Sample.Seconds < stretchSampling*0.02 || r.Sample.Seconds <= 0.02 || !stretched {
		t.Errorf("%d samples in %.2f s, a note of the longer sampling %v: want at least %d samples (or %g s of sampling), sampled past 0.02 s and said", r.Sample.Samples, r.Sample.Seconds, stretched, minSamples, stretchSampling*0.02)
	}
}
