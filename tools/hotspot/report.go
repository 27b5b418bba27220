package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strings"

	"perfinsp/libperfutil/events"
)

// Report is the whole result (--json).
type Report struct {
	Target   string       `json:"target"`
	PID      int          `json:"pid"`
	Metric   string       `json:"metric,omitempty"` // -m: the event counted per call, besides the wall time
	Sample   SampleResult `json:"sample"`
	Hot      []HotFunc    `json:"hot"`
	Levels   []Level      `json:"levels"`
	Funcs    []*FuncStat  `json:"functions"`
	HookHits uint64       `json:"hook_executions"`
	Lost     uint64       `json:"lost"`
	Folded   []string     `json:"folded"`
	Seconds  float64      `json:"seconds"`
	Overhead *Overhead    `json:"overhead,omitempty"`
	Stopped  string       `json:"stopped,omitempty"`
	Death    *Death       `json:"death,omitempty"` // how the target died during the walk
	Notes    []string     `json:"notes,omitempty"`
}

// Overhead is the walk's estimate of the target's slowdown: the probed
// calls times the measured cost of one, against the target's CPU time
// during the walk.
type Overhead struct {
	BudgetPct   float64     `json:"budget_pct"` // --max-overhead (0: none)
	Duty        float64     `json:"duty_pct"`   // --duty (100: the budget decides)
	Calibration Calibration `json:"calibration"`
	ProbedCalls uint64      `json:"probed_calls"`
	ProbeCostNs float64     `json:"probe_cost_ns"`
	// Traps is the probe traps ProbeCostNs charges: every hit the probes'
	// events counted (lost records too) and the estimated unseen hits of
	// probes half closed.
	Traps       float64 `json:"probe_traps"`
	TargetCPUNs uint64  `json:"target_cpu_ns"` // during the levels, probe cost included
	// CloseHits: probe hits (entries and exits) while probes were being closed (in ProbeCostNs).
	CloseHits uint64 `json:"close_hits"`
	// Samples and their cost (calibrated cost per sample x samples).
	Samples      int     `json:"samples"`
	SampleCostNs float64 `json:"sample_cost_ns"`
	// WalkCPUNs is the target's CPU time from the start of the sampling
	// to the end of the walk (its threads' schedstat), costs included.
	WalkCPUNs uint64 `json:"walk_cpu_ns"`
	// EstimatedPct = (sample cost + probe cost) / (WalkCPUNs - those
	// costs): the slowdown of the target's own work from the sampling's
	// start to the walk's end, by the walk's own count.
	EstimatedPct float64 `json:"estimated_slowdown_pct"`
	// EndWaitSec is how long the walk waited after its last level for
	// its costs (the last closing phase's) to fall within the aim.
	EndWaitSec float64 `json:"end_wait_s,omitempty"`
}

// folded derives folded stacks ("main;a;b;c;hot 1234") from the walk: the
// calls of each hot function split along its callers by their shares,
// level by level.
func folded(funcs []*FuncStat, hot []HotFunc) []string {
	byKey := map[string]*FuncStat{}
	for _, f := range funcs {
		byKey[f.key()] = f
	}
	weights := map[string]float64{}
	var up func(f *FuncStat, chain []string, w float64, depth int)
	up = func(f *FuncStat, chain []string, w float64, depth int) {
		chain = append([]string{f.Name}, chain...)
		if len(f.Callers) == 0 || depth > 64 {
			if len(f.Callers) == 0 && len(f.RootPaths) > 0 {
				// Above it: its most sampled path to the root.
				p := f.RootPaths[0].Path
				for i := range p {
					chain = append([]string{p[i]}, chain...)
				}
			}
			weights[strings.Join(chain, ";")] += w
			return
		}
		for _, c := range f.Callers {
			cw := w * c.Share
			if cf := byKey[c.key()]; cf != nil && cf != f && !contains(chain, cf.Name) {
				up(cf, chain, cw, depth+1)
			} else {
				weights[strings.Join(append([]string{c.Name}, chain...), ";")] += cw
			}
		}
	}
	for _, h := range hot {
		if f := byKey[h.key()]; f != nil {
			up(f, nil, float64(f.Calls), 0)
		}
	}
	var out []string
	for k, w := range weights {
		if n := math.Round(w); n > 0 {
			out = append(out, fmt.Sprintf("%s %d", k, int64(n)))
		}
	}
	sort.Strings(out)
	return out
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func dur(ns float64) string {
	switch {
	case ns >= 1e9:
		return fmt.Sprintf("%.3fs", ns/1e9)
	case ns >= 1e6:
		return fmt.Sprintf("%.3fms", ns/1e6)
	case ns >= 1e3:
		return fmt.Sprintf("%.1fus", ns/1e3)
	}
	return fmt.Sprintf("%.0fns", ns)
}

// writeText prints the hot-path call graph.
func (r *Report) writeText(w io.Writer) {
	fmt.Fprintf(w, "hotspot: %s (pid %d): %d samples in %.1fs\n", r.Target, r.PID, r.Sample.Samples, r.Sample.Seconds)
	fmt.Fprintln(w, "hot functions:")
	for _, h := range r.Hot {
		where := h.Path
		if where == "" {
			where = "no file"
		}
		fmt.Fprintf(w, "  %6.1f%%  %s  (%s)\n", h.Pct, h.Name, where)
	}
	fmt.Fprintln(w, "hot-path call graph (per function: calls, time per call mean/min/max over the complete entry/exit pairs, the probes' own time taken out; callers by share of calls):")
	for _, f := range r.Funcs {
		fmt.Fprintf(w, "  [level %d] %s: %d calls", f.Level, f.Name, f.Calls)
		if f.Returns > 0 {
			fmt.Fprintf(w, ", time/call mean %s median %s min %s max %s (%d pairs", dur(f.MeanNs), dur(f.MedianNs), dur(float64(f.MinNs)), dur(float64(f.MaxNs)), f.Returns)
			if f.FewPairs {
				fmt.Fprint(w, ": too few to rely on")
			}
			fmt.Fprintf(w, "; %s with the probes' own time)", dur(f.MeanRawNs))
			if f.Lost > 0 {
				fmt.Fprintf(w, " [%d probe records lost in this level: calls missing from these figures]", f.Lost)
			}
			if r.Metric != "" {
				fmt.Fprintf(w, ", %s/call mean %s median %s min %s max %s", r.Metric, r.metricValue(f.MetricMean), r.metricValue(f.MetricMedian), r.metricValue(float64(f.MetricMin)), r.metricValue(float64(f.MetricMax)))
			}
		}
		if f.Calls == 0 {
			fmt.Fprint(w, " (not entered while instrumented: called before the walk and not returned yet — a loop that never returns? — or not called at all)")
		}
		if f.Cut > 0 {
			fmt.Fprintf(w, ", %d returned after the probes were removed", f.Cut)
		}
		if f.NoExit > 0 {
			fmt.Fprintf(w, ", %d left unseen (longjmp, an exit not probed, or a moved stack)", f.NoExit)
		}
		if f.ExitsNote != "" {
			fmt.Fprintf(w, " (time per call not measured: %s)", f.ExitsNote)
		} else if f.ExitsUnprobed > 0 {
			fmt.Fprintf(w, " (%d exits not probed: indirect or conditional jumps)", f.ExitsUnprobed)
		}
		fmt.Fprintln(w)
		for _, c := range f.Callers {
			note := ""
			if c.NoProbe != "" {
				note = "  (" + c.NoProbe + ")"
			}
			fmt.Fprintf(w, "      %5.1f%%  %8d  from %s%s\n", 100*c.Share, c.Calls, c.Name, note)
		}
		if len(f.RootPaths) > 0 {
			fmt.Fprintf(w, "      its callers from the %d sampled stacks through it, up to the root:\n", f.RootSamples)
			for _, p := range f.RootPaths {
				fmt.Fprintf(w, "      %5.1f%%  %8d  %s\n", 100*float64(p.Samples)/float64(f.RootSamples), p.Samples, strings.Join(p.Path, " <- "))
			}
		}
	}
	fmt.Fprintf(w, "walk: %d levels, %d probe hits (entries and returns), %d lost\n", len(r.Levels), r.HookHits, r.Lost)
	if o := r.Overhead; o != nil {
		budget := "no budget"
		switch {
		case o.Duty > 0 && o.Duty < 100:
			budget = fmt.Sprintf("--duty %g", o.Duty)
		case o.BudgetPct > 0 && o.BudgetPct < 100:
			budget = fmt.Sprintf("budget %g%%", o.BudgetPct)
		}
		fmt.Fprintf(w, "overhead: %.0f probe traps (%d probed calls seen, %d hits while closing) x %s or %s a call (measured: first instruction single-stepped or emulated) = %s, %d samples x %s = %s, of the target's %s of CPU since sampling began: estimated slowdown %.1f%% (%s)\n",
			o.Traps, o.ProbedCalls, o.CloseHits, dur(o.Calibration.CallNs), dur(o.Calibration.EmulatedNs), dur(o.ProbeCostNs),
			o.Samples, dur(o.Calibration.SampleNs), dur(o.SampleCostNs), dur(float64(o.WalkCPUNs)), o.EstimatedPct, budget)
	}
	if o := r.Overhead; o != nil && o.BudgetPct > 0 && o.BudgetPct < 100 && !(o.Duty > 0 && o.Duty < 100) {
		r.writeBudget(w, o)
	}
	for _, n := range r.Notes {
		fmt.Fprintln(w, "note:", n)
	}
	if len(r.Folded) > 0 {
		fmt.Fprintln(w, "folded stacks:")
		for _, l := range r.Folded {
			fmt.Fprintln(w, "  "+l)
		}
	}
}

// writeBudget says what the budget did: how long the probes were in, in
// how many windows, and, when the estimate is over the budget, where the
// cost went.
func (r *Report) writeBudget(w io.Writer, o *Overhead) {
	var on, total, closeS, closeTraps, wait float64
	windows := 0
	for _, lv := range r.Levels {
		on += lv.OnSec
		total += lv.Seconds
		closeS += lv.CloseSec
		closeTraps += lv.CloseTraps
		windows += lv.Windows
		wait += lv.BudgetWaitSec
	}
	fmt.Fprintf(w, "budget: probes in place %.2fs of the levels' %.2fs (%.0f%%) in %d windows; a window ended once its traps and what closing it would cost (%.0f traps while closing, %.2fs of closes) reached %.2g%% of the target's CPU, and the next opened once that allowed one as dear as the last (%.2fs waited before levels)\n",
		on, total, 100*on/max(total, 1e-9), windows, closeTraps, closeS, o.BudgetPct*budgetAim, wait)
	if o.EndWaitSec > 0 {
		fmt.Fprintf(w, "budget: after the last level the walk waited %.2fs, probes out, for its costs to be within that\n", o.EndWaitSec)
	}
	if o.EstimatedPct > o.BudgetPct {
		fmt.Fprintf(w, "budget: over by the estimate: the probes' closing phases (%.2fs: each close waits for the kernel, the probes still open trap) took %.0f of the %.0f traps (%s together), the samples %d (%s); a window is closed before it overspends, but the first has no window before it to go by, and the walk ended before the target had paid for it (a longer run does; fewer --top functions cost less)\n",
			closeS, closeTraps, o.Traps, dur(o.ProbeCostNs), o.Samples, dur(o.SampleCostNs))
	}
}

// metricValue formats a value of the -m metric: a time for the clocks.
func (r *Report) metricValue(v float64) string {
	if ev, ok := events.Lookup(r.Metric); ok && ev.Unit == "ns" {
		return dur(v)
	}
	return fmt.Sprintf("%.0f", v)
}

func writeFile(path string, fn func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	if err := fn(f); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func (r *Report) writeJSON(w io.Writer) error {
	e := json.NewEncoder(w)
	e.SetIndent("", " ")
	return e.Encode(r)
}
