package main

import (
	"math"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"perfinsp/internal/testenv"
)

func TestParsePercent(t *testing.T) {
	for in, want := range map[string]float64{"5": 5, "5%": 5, " 2.5% ": 2.5, "0": 0, "100%": 100} {
		if got, err := parsePercent(in); err != nil || got != want {
			t.Errorf("parsePercent(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "five", "-1", "101%", "5%%"} {
		if _, err := parsePercent(in); err == nil {
			t.Errorf("parsePercent(%q): no error", in)
		}
	}
}

// TestBudgetRule checks the budget's arithmetic: the probes may be in
// place while the walk's counted cost so far is at most the aim (a share
// of the budget) of the target's own CPU time so far; a window may spend
// what the aim leaves.
func TestBudgetRule(t *testing.T) {
	w := &Walk{Budget: 5, meter: newCPUMeter()}
	a := w.aim()
	if budgetAim <= 0 || budgetAim >= 1 || math.Abs(a-0.05*budgetAim) > 1e-12 {
		t.Fatalf("aim %g for a 5%% budget (budgetAim %g), want a share of 0.05", a, budgetAim)
	}
	// Nothing spent yet, no CPU seen: within.
	if !costWithin(0, 0, a) {
		t.Error("no cost, no CPU: not within the budget")
	}
	// A cost of exactly the aim of 100 ms of own CPU is within; 3 % more is not.
	c := a * 100e6
	if !costWithin(c, uint64(100e6+c), a) {
		t.Errorf("%.2f ms of cost for 100 ms of own CPU refused at aim %g", c/1e6, a)
	}
	if costWithin(1.03*c, uint64(100e6+c), a) {
		t.Errorf("%.2f ms of cost for under 100 ms of own CPU accepted at aim %g", 1.03*c/1e6, a)
	}
	// The sampling's cost counts too: half of it sampling, half probes.
	w.SampleCostNs, w.CostNs = c/2, c/2
	w.meter.total = uint64(97e6 + c) // own 97 ms
	if w.withinBudget() {
		t.Error("sampling + probes at the aim of 100 ms accepted for 97 ms of own CPU")
	}
	w.meter.total = uint64(101e6 + c)
	if !w.withinBudget() {
		t.Error("sampling + probes at the aim of 100 ms refused for 101 ms of own CPU")
	}
	// A window may spend what the aim leaves: 1 ms more than that is refused.
	w.meter.total = uint64(200e6 + c)
	left := a*(200e6+c-c) - c
	if !w.affordable(0.9*left) || w.affordable(left+1e6) {
		t.Errorf("%.2f ms left by the aim: 0.9 of it refused or 1 ms more accepted", left/1e6)
	}
}

// TestOverheadBudget: with a hot function costing about a probed call, probes always
// in place (--max-overhead 0) cost the target about as much CPU as its own
// work (the measured cost per call times the calls is most of the target's
// CPU time, never more; hot's first instruction is single-stepped, the
// dearer kind); by default the 5 % budget takes the probes out
// between windows and the estimated slowdown stays within the budget.
func TestOverheadBudget(t *testing.T) {
	build(t)
	// The calibration (at start-up) and the target's CPU (during the walk)
	// are measured at different moments: on a busy machine one of them can
	// be disturbed alone.
	testenv.Retry(t, 3, "overhead budget", func(a *testenv.Attempt) { overheadBudgetOnce(t, a) })
}

func overheadBudgetOnce(t *testing.T, a *testenv.Attempt) {
	est := map[string]*Overhead{}
	for _, budget := range []string{"0", ""} {
		js := filepath.Join(t.TempDir(), "r.json")
		args := []string{"-q", "-s", "0.5", "--depth", "1", "--json", js, "-o", os.DevNull}
		if budget != "" {
			args = append(args, "--max-overhead", budget, "--period", "2s")
		} else {
			// The default budget's level lasts 2000 probed calls however
			// long that takes: their cost (about 80 ms) is more than the
			// aim allows for the target's CPU before the level (at most
			// about 1.5 s: the half-second sampling and the calibration),
			// so the probes must come out and go back in to reach the
			// period (a 2 s level could end, on a busy machine, while they
			// were out; 300 calls fitted in the first window).
			args = append(args, "--period", "2000", "--level-max", "0")
		}
		args = append(args, "--", tools.example, longRun, "20000")
		out, err := walkExample(t, js, args...)
		if !isExit(err, 3) || allRE.FindString(out) == "" {
			t.Fatalf("budget %q: exit %v, output %q: want the example's line and exit 3", budget, err, out)
		}
		r := readReport(t, js)
		o := r.Overhead
		if o == nil || len(r.Levels) != 1 {
			t.Fatalf("budget %q: overhead %+v, levels %+v: want the estimate and one level", budget, o, r.Levels)
		}
		t.Logf("budget %q: cost/call %.1fus (spread %.1fus), %d probed calls, probe cost %.1fms of %.1fms target CPU: estimated %.1f%%, %d windows",
			budget, o.Calibration.CallNs/1e3, o.Calibration.SpreadNs/1e3, o.ProbedCalls, o.ProbeCostNs/1e6, float64(o.TargetCPUNs)/1e6, o.EstimatedPct, r.Levels[0].Windows)
		if runtime.GOARCH == "amd64" && (o.Calibration.EmulatedNs <= 0 || o.Calibration.EmulatedNs > o.Calibration.CallNs) {
			a.Errorf("budget %q: calibration %+v: want the emulated kind measured, no dearer than the single-stepped", budget, o.Calibration)
		}
		if o.Calibration.CallNs <= 0 || o.ProbedCalls != funcByLevel(r, 0)["hot"].Calls {
			a.Errorf("budget %q: calibration %+v, probed calls %d: want a cost and hot's calls", budget, o.Calibration, o.ProbedCalls)
		}
		est[budget] = o
		if budget == "" && r.Levels[0].Windows < 2 {
			a.Errorf("default budget: %d windows, want the probes taken out and put back", r.Levels[0].Windows)
		}
	}
	if all := est["0"]; all.ProbeCostNs > 1.1*float64(all.TargetCPUNs) || all.ProbeCostNs < 0.25*float64(all.TargetCPUNs) {
		a.Errorf("probes always in: probe cost %.1fms against the target's %.1fms of CPU: the measured cost per call does not explain the target's CPU",
			all.ProbeCostNs/1e6, float64(all.TargetCPUNs)/1e6)
	}
	if d := est[""]; d.BudgetPct != 5 || d.EstimatedPct > 6 || d.EstimatedPct <= 0 {
		a.Errorf("default budget %.1f%%: estimated slowdown %.1f%%, want (0, 5] (+1 for the last window)", d.BudgetPct, d.EstimatedPct)
	}
}

// TestEntryEmulated: a push of a register first (the frame pointer
// prologue) is the cheaper, emulated kind; anything else, or a file that
// cannot be read, the dearer, single-stepped one.
func TestEntryEmulated(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the instruction kinds are x86-64's")
	}
	f := filepath.Join(t.TempDir(), "code")
	code := []byte{0x55, 0x48, 0x89, 0xe5, 0x41, 0x57, 0x8b, 0x05, 0xf3, 0x0f, 0x1e, 0xfa, 0x41}
	if err := os.WriteFile(f, code, 0o644); err != nil {
		t.Fatal(err)
	}
	for off, want := range map[uint64]bool{0: true, 1: false, 4: true, 6: false, 8: false, 12: false} {
		if got := entryEmulated(f, off); got != want {
			t.Errorf("offset %d (% x): emulated %v, want %v", off, code[off:min(int(off)+2, len(code))], got, want)
		}
	}
	if entryEmulated(filepath.Join(t.TempDir(), "missing"), 0) {
		t.Error("a missing file counted as emulated")
	}
	c := Calibration{CallNs: 20000, EmulatedNs: 6000, EntryNs: 12000, EntryEmulatedNs: 3000}
	pc, pe := c.cost(f, 0)
	mc, me := c.cost(f, 1)
	if pc != 6000 || pe != 3000 || mc != 20000 || me != 12000 {
		t.Errorf("cost: push %v (entry alone %v), mov %v (%v); want 6000 (3000), 20000 (12000)", pc, pe, mc, me)
	}
}

// TestCalibrationMatchesTarget: with a hot function of a fraction of a
// microsecond, a probed level's CPU time in the target is almost all probe
// cost, so the target's CPU per probed call measures the real cost of a
// call of each kind: hot (single-stepped first instruction) at level 0, c
// and x (push first, emulated) at level 1. The calibrated costs charged
// for them must agree within a factor of two: the two are CPU times taken
// at different moments (the calibration at start-up, the target during the
// level), so on a loaded machine they can differ by a third; a wrong
// calibration is off by far more (a probe left open in the "without"
// batches gives a small fraction of the true cost). A level lasts 10000
// calls, not a time: beside a CPU-heavy job the target got 30 ms of CPU
// in a 2 s level. bench/hotspot.sh prints the ratio on a quiet machine.
func TestCalibrationMatchesTarget(t *testing.T) {
	build(t)
	// times of two moments: made up to three times, each attempt logged
	testenv.Retry(t, 3, "calibrated cost against the target's", func(a *testenv.Attempt) { calibrationMatchesOnce(t, a) })
}

func calibrationMatchesOnce(t *testing.T, a *testenv.Attempt) {
	js := filepath.Join(t.TempDir(), "r.json")
	out, err := walkExample(t, js, "-q", "-s", "0.5", "--depth", "2", "--max-overhead", "0", "--period", "10000", "--level-max", "0", "--json", js, "-o", os.DevNull, "--", tools.example, longRun, "200")
	if !isExit(err, 3) || allRE.FindString(out) == "" {
		t.Fatalf("exit %v, output %q: want the example's line and exit 3", err, out)
	}
	r := readReport(t, js)
	if len(r.Levels) != 2 || r.Overhead == nil {
		t.Fatalf("levels %+v, overhead %+v: want 2 levels and the estimate", r.Levels, r.Overhead)
	}
	for _, lv := range r.Levels {
		if lv.Calls < 1000 || lv.TargetCPUNs == 0 {
			t.Fatalf("level %d: %d calls, %d ns of target CPU: want many calls measured", lv.Level, lv.Calls, lv.TargetCPUNs)
		}
		real := float64(lv.TargetCPUNs) / float64(lv.Calls)
		est := lv.CostNs / float64(lv.Calls)
		t.Logf("level %d %v: target CPU per probed call %.1f us, calibrated cost %.1f us (ratio %.2f)", lv.Level, lv.Frontier, real/1e3, est/1e3, est/real)
		if est < 0.5*real || est > 2*real {
			a.Errorf("level %d %v: calibrated %.1f us per call against %.1f us measured in the target", lv.Level, lv.Frontier, est/1e3, real/1e3)
		}
	}
}
