package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"

	"perfinsp/internal/testenv"
)

// veryHotWork is the example's work per call of hot for the very hot
// function test: a few nanoseconds, so hot is called tens of millions of
// times a second and a probe on it (a trap of one to tens of
// microseconds) slows every call many times over while it is in place.
const veryHotWork = "5"

var iterRE = regexp.MustCompile(`iterations=(\d+) .* cpu_us=(\d+)`)

// cpuPerIter is the example's CPU time per iteration of its loop (its
// last line: the probe traps are in its CPU time).
func cpuPerIter(t *testing.T, out string) float64 {
	t.Helper()
	m := iterRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("example output %q: no iterations and CPU time", out)
	}
	n, _ := strconv.ParseFloat(m[1], 64)
	us, _ := strconv.ParseFloat(m[2], 64)
	if n == 0 || us == 0 {
		t.Fatalf("example output %q: no work done", out)
	}
	return us / n
}

// TestBudgetHoldsOnVeryHotFunction: the walk of a function called tens of
// millions of times a second, with the default 5 % budget, slows the
// target by at most the budget: the walked example's CPU time per
// iteration against that of the same example run unwalked beside it (the
// same load), both ended at the same moment, once the walk has written
// its report. Every trap counts here, also those the records do not show
// (the hits while the probes are closed, one kernel grace period each, or
// lost in a full ring), and the walk's own estimate must account for the
// slowdown within a factor of two (or 1.5 points).
func TestBudgetHoldsOnVeryHotFunction(t *testing.T) {
	build(t)
	// Two runs side by side on a shared machine: their CPU per iteration
	// differs by a few percent from the load alone now and then.
	testenv.Retry(t, 3, "walked against unwalked", func(a *testenv.Attempt) { budgetHoldsOnce(t, a) })
}

func budgetHoldsOnce(t *testing.T, a *testenv.Attempt) {
	js := filepath.Join(t.TempDir(), "r.json")
	var plainOut, walkOut bytes.Buffer
	plain := exec.Command(tools.example, longRun, veryHotWork)
	plain.Stdout = &plainOut
	if err := plain.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = plain.Process.Kill() }()
	c := exec.Command(tools.hotspot, "-q", "-s", "0.5", "--period", "1s", "--depth", "2", "--json", js, "-o", os.DevNull, "--", tools.example, longRun, veryHotWork)
	c.Stdout = &walkOut
	err := runWalk(t, c, js, func(r Report) error {
		if err := plain.Process.Signal(syscall.SIGUSR1); err != nil {
			return err
		}
		return endExampleRun(r)
	}, nil)
	if !isExit(err, 3) {
		t.Fatalf("hotspot: %v (output %q), want the example's exit status 3", err, walkOut.String())
	}
	if err := plain.Wait(); !isExit(err, 3) {
		t.Fatalf("unwalked example: %v", err)
	}
	r := readReport(t, js)
	o := r.Overhead
	if o == nil || len(r.Levels) == 0 || o.BudgetPct != 5 {
		t.Fatalf("overhead %+v, levels %+v: want the default budget's estimate and a level", o, r.Levels)
	}
	p, w := cpuPerIter(t, plainOut.String()), cpuPerIter(t, walkOut.String())
	slow := 100 * (w - p) / p
	var windows int
	for _, lv := range r.Levels {
		windows += lv.Windows
	}
	t.Logf("CPU per iteration %.4f us walked, %.4f us unwalked: %+.1f %%; estimate %.1f %% (%.0f traps, %d probed calls seen, %d lost; %d windows in %d levels)",
		w, p, slow, o.EstimatedPct, o.Traps, o.ProbedCalls, r.Lost, windows, len(r.Levels))
	if windows == 0 {
		t.Fatalf("no window: nothing was probed")
	}
	if slow > o.BudgetPct {
		a.Errorf("the walked target's CPU per iteration is %+.1f %% of the unwalked one's: over the %g %% budget", slow, o.BudgetPct)
	}
	if slow > 1.5 && (o.EstimatedPct < slow/2 || o.EstimatedPct > 2*slow) {
		a.Errorf("estimated slowdown %.1f %% against %.1f %% measured", o.EstimatedPct, slow)
	}
}
