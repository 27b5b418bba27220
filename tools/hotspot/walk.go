package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"perfinsp/libperfutil/events"
	"perfinsp/libperfutil/uprobe"
)

// Period ends a level: after Calls entries of the level's functions, or
// after Duration, whichever comes first (a zero field is no limit).
type Period struct {
	Calls    uint64
	Duration time.Duration
}

// CallerStat is one caller of an instrumented function.
type CallerStat struct {
	Func
	Calls uint64  `json:"calls"`
	Share float64 `json:"share"`
}

// FuncStat is what the probes of one instrumented function saw.
type FuncStat struct {
	Func
	Level   int    `json:"level"`
	Calls   uint64 `json:"calls"`   // entries seen
	Returns uint64 `json:"returns"` // entries matched with their exit (the pairs the times are from)
	Cut     uint64 `json:"cut"`     // entries whose exit came after their probes were removed
	// NoExit counts the entries whose exit was not seen although the
	// probes stayed: left by longjmp or an unprobed exit (ExitsUnprobed),
	// or resumed on another stack.
	NoExit uint64 `json:"no_exit"`
	// ExitProbes is the number of exits probed (return instructions and
	// jumps out of the function); ExitsUnprobed those that could not be;
	// ExitsNote, if set, why the calls' durations are not measured.
	ExitProbes    int     `json:"exit_probes"`
	ExitsUnprobed int     `json:"exits_unprobed,omitempty"`
	ExitsNote     string  `json:"exits_note,omitempty"`
	MeanNs        float64 `json:"mean_ns"`
	MinNs         uint64  `json:"min_ns"`
	MaxNs         uint64  `json:"max_ns"`
	// The -m metric per call (entry to return): its mean, min and max.
	MetricMean float64       `json:"metric_mean,omitempty"`
	MetricMin  uint64        `json:"metric_min,omitempty"`
	MetricMax  uint64        `json:"metric_max,omitempty"`
	Callers    []*CallerStat `json:"callers"`
	sumNs      float64
	costNs     float64 // the calibrated cost of one probed call of it
	entryNs    float64 // ... of a call with its entry probe alone
	sumMetric  float64
	callers    map[string]*CallerStat
	exits      []uint64 // the file offsets of the probed exits
	pairNs     float64  // the probes' own time in each pair (Calibration.InPairNs)
	sumRawNs   float64
	// MeanRawNs is the mean before the probes' own time is taken out.
	MeanRawNs float64 `json:"mean_raw_ns"`
	// FewPairs: the times rest on fewer than minPairs pairs.
	FewPairs bool `json:"few_pairs,omitempty"`
	// MedianNs, MetricMedian: the medians (of the first maxKept pairs).
	MedianNs         float64 `json:"median_ns"`
	MetricMedian     float64 `json:"metric_median,omitempty"`
	kept, keptMetric []float64
	// RootPaths: for a function whose callers the probes did not see (not
	// entered while probed: a loop that never returns, or the walk's
	// end), the paths up to its thread's root in the sampled stacks
	// through it (RootSamples of them).
	RootPaths   []RootPath `json:"root_paths,omitempty"`
	RootSamples int        `json:"root_samples,omitempty"`
	// Lost is the probe records lost in its level (entries or exits of
	// any of the level's functions): calls the counts and times miss.
	Lost uint64 `json:"lost"`
}

// minPairs is the number of complete pairs below which a function's times
// are marked as resting on too few calls.
const minPairs = 20

// maxKept bounds the per-call values kept for the medians.
const maxKept = 1 << 16

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// Level is one step of the walk.
type Level struct {
	Level    int      `json:"level"`
	Frontier []string `json:"frontier"`
	// Probes is the number of probe events open during the level (1 +
	// exits per function and thread); PerfFDs the probe fds the tool held
	// open at that moment, counted from /proc/self/fd (its perf event fds
	// but the death watch's).
	Probes     int     `json:"active_probes"`
	PerfFDs    int     `json:"perf_fds_open"`
	Calls      uint64  `json:"calls"`
	Seconds    float64 `json:"seconds"`
	EndedBy    string  `json:"ended_by"` // "period", "time limit", "target exited", "signal"
	Skipped    []Func  `json:"not_instrumented,omitempty"`
	PerfFDsEnd int     `json:"perf_fds_after_close"`
	Windows    int     `json:"windows"` // times the probes were put in place (duty cycle)
	// OnSec is the time the level's probes were in place (windows, to
	// the start of each closing phase).
	OnSec float64 `json:"probes_in_s"`
	// PerCPU: the probes were opened per CPU for every process, not per
	// thread (fewer events; hits outside the tree ignored).
	PerCPU bool `json:"per_cpu,omitempty"`
	// PIDs are the processes whose probes were hit (the target's children too).
	PIDs []int `json:"pids"`
	// Attached counts the threads probed after the level's start (new
	// threads and processes of the target).
	Attached int `json:"threads_attached"`
	// TargetCPUNs is the target's CPU time (its process tree's, probe
	// traps included) during the level; CostNs the estimated cost of the
	// level's probed calls.
	TargetCPUNs uint64  `json:"target_cpu_ns"`
	CostNs      float64 `json:"probe_cost_ns"`
	// CloseHits are the probe hits (entries and exits) while the level's
	// probes were being closed (each close waits for the kernel's grace
	// periods while the probes still open trap): charged, not counted as
	// calls.
	CloseHits uint64 `json:"close_hits"`
	// BudgetWaitSec is how long the level waited for the walk's costs so
	// far to fall within the budget before its probes first went in.
	BudgetWaitSec float64 `json:"budget_wait_s,omitempty"`
	// OpenSec is the time spent putting the probes in (their
	// breakpoints trap from the first open on).
	OpenSec float64 `json:"open_s"`
	// CloseTraps are the traps charged while the level's probes were
	// being closed (counted, and estimated for half-closed sites).
	CloseTraps float64 `json:"close_traps"`
	// CloseSec is the time spent closing probes (a probe of the uprobe
	// PMU waits for the kernel's grace periods: tens of milliseconds, more
	// under load; one held by a dynamic event does not).
	CloseSec float64 `json:"close_s"`
	// Dynamic: the level's probed instructions were tracefs dynamic
	// events (uprobe.Dynamic), whose anchors (perf fds that trap nowhere,
	// one per instruction, not counted in PerfFDs) were closed after the
	// probes, in AnchorCloseSec.
	Dynamic        bool    `json:"dynamic_events"`
	AnchorCloseSec float64 `json:"anchor_close_s,omitempty"`
	pids           map[uint32]int
	lost           uint64 // probe records lost in the level
}

// Walk is the state of a hot-spot walk.
type Walk struct {
	PMU    uprobe.PMU
	PID    int
	Period Period
	Duty   float64 // percent of the time a level's probes are in place (0 or 100: always)
	// Budget, in percent, bounds the target's slowdown when Duty is not
	// set: from the probes' trap counts, the measured cost of a trap and
	// the target's CPU time, a window ends before it and its closing
	// phase would exceed the budget's aim, and the next opens once the
	// target has paid for one like it (0: no budget).
	Budget float64
	Cal    *Calibration // the measured cost of a probed call (nil: none, no budget)
	// Metric, if set, is counted per thread in a group with the thread's
	// probes; each hit reads it (PERF_SAMPLE_READ): the metric per call.
	Metric   *events.Event
	LevelMax time.Duration // a level ends after this even if its period is not over (0: no limit)
	MaxDepth int
	Alive    func() bool
	Progress io.Writer
	tree     *procTree
	start    time.Time

	Levels   []Level
	Funcs    []*FuncStat
	HookHits uint64 // probe hits delivered (entries + returns)
	Lost     uint64
	Entries  uint64 // entry hits (probed calls)
	// CostNs is the estimated cost of those calls and of the hits while
	// probes were being closed (CloseHits): each one charged the
	// calibrated cost of its function's kind of first instruction.
	CostNs    float64
	CloseHits uint64
	// lastWindowCost is the cost of the last window, its closing phase
	// included: the next one opens once the budget can pay for as much.
	lastWindowCost float64
	// Traps is the probe traps the walk charged: every hit its probe
	// events counted, and the estimated unseen hits of half-closed sites.
	Traps float64
	// closes, closeSum: the probe closes so far and their total time (ns).
	closes   int
	closeSum float64
	// EndWaitSec is how long the walk waited after its last level for its
	// costs to fall within the budget's aim.
	EndWaitSec float64
	// SampleCostNs is the cost of the sampling step before the walk
	// (samples x the calibrated cost of one): the budget counts it.
	SampleCostNs float64
	// meter is the target's CPU time since sampling began (the budget's
	// denominator, with the costs above).
	meter    *cpuMeter
	meterTid []int // the threads the meter reads (the tree's, refreshed by the scans)
	// CPUStart, CPULast: the target's CPU time (ns) at the walk's start
	// and at the last reading while it lived.
	CPUStart, CPULast uint64
	visited           map[string]*FuncStat
	// inPlace says what is instrumented now; AtDeath what was when the
	// target was first seen gone ("" while it lives).
	inPlace string
	AtDeath string
	watch   *deathWatch     // its perf fds are not probes
	dyn     *uprobe.Dynamic // the level's dynamic events: their anchors are not probes
}

// probeFDs counts the probe fds open (the perf fds but the death watch's
// and the dynamic events' anchors).
func (w *Walk) probeFDs() int {
	return perfFDs() - w.watch.count() - w.dyn.Events()
}

// alive is Alive, noting what was instrumented when the target is first
// seen gone.
func (w *Walk) alive() bool {
	if w.Alive() {
		return true
	}
	if w.AtDeath == "" {
		w.AtDeath = w.inPlace
		if w.AtDeath == "" {
			w.AtDeath = "before the first level's probes went in"
		}
	}
	return false
}

type probeRef struct {
	fs  *FuncStat
	ret bool   // an exit probe
	off uint64 // the probed instruction
}

// probeSite is one probed instruction (all threads' events on it): its
// breakpoint stays until the last of them is closed.
type probeSite struct {
	fs  *FuncStat
	off uint64
}

// frame is a call entered and not yet left: sp is the stack pointer at
// the entry (the return address's slot), which is the stack pointer again
// at the function's exit (a return, or a tail jump).
type frame struct {
	fs *FuncStat
	t  uint64
	v  uint64 // the metric at entry
	sp uint64
	// nested is the probes' cost inside this call so far: the probed
	// calls of other functions of the level made from it (ns).
	nested float64
}

// stackKey names the stack a call runs on: its thread's. (Go code, whose
// goroutines move between threads and stacks, is never probed: funcs.go.)
type stackKey struct {
	id uint32 // the thread
}

// probeRegs are the registers every probe hit samples: the stack pointer,
// to pair entries and exits.
const probeRegs = uprobe.RegSP

// callStacks pairs the entries and exits of the probed calls, per stack.
type callStacks map[stackKey][]frame

// enter records an entry at stack pointer sp. The calls on that stack
// entered at or below sp have ended unseen (a live caller's frame is above
// its callee's): they are dropped and counted in NoExit.
func (cs callStacks) enter(k stackKey, f frame) {
	st := cs[k]
	for len(st) > 0 && st[len(st)-1].sp <= f.sp {
		st = drop(st)
	}
	if len(st) < 4096 {
		st = append(st, f)
	}
	cs[k] = st
}

// exit pairs an exit of fs at stack pointer sp with its entry: the calls
// entered below sp are dropped (they ended unseen: longjmp, an unprobed
// exit) and counted in NoExit; the call on top must be fs's, entered at
// sp. ok false: no entry of this call was seen (entered before the probes
// went in, or an exit hit with the stack moved, a jump out to a function's
// cold part).
func (cs callStacks) exit(k stackKey, fs *FuncStat, sp uint64) (frame, bool) {
	st := cs[k]
	for len(st) > 0 && st[len(st)-1].sp < sp {
		st = drop(st)
	}
	cs[k] = st
	if len(st) == 0 || st[len(st)-1].sp != sp || st[len(st)-1].fs != fs {
		return frame{}, false
	}
	f := st[len(st)-1]
	st = st[:len(st)-1]
	if len(st) > 0 { // the caller's time holds this call's probes
		st[len(st)-1].nested += fs.costNs + f.nested
	}
	cs[k] = st
	return f, true
}

// drop removes the top call of st, which ended unseen: counted in its
// function's NoExit, its entry probe's cost charged to the call below.
func drop(st []frame) []frame {
	d := st[len(st)-1]
	d.fs.NoExit++
	st = st[:len(st)-1]
	if len(st) > 0 {
		st[len(st)-1].nested += d.fs.entryNs + d.nested
	}
	return st
}

// stopNames are the top of a program's call graph: the walk records them
// as callers but does not instrument them (they are entered once).
var stopNames = map[string]bool{"main": true, "_start": true, "__libc_start_main": true, "__libc_start_call_main": true}

// Run walks up from the hot functions, one level at a time.
func (w *Walk) Run(ctx context.Context, hot []Func) error {
	w.start = time.Now()
	w.visited = map[string]*FuncStat{}
	w.CPUStart, _ = w.tree.cpuNs()
	if w.meter == nil {
		w.meter = newCPUMeter()
	}
	if w.meterTid == nil {
		w.meterTid, _ = w.tree.threads()
	}
	w.meter.update(w.meterTid)
	w.CPULast = w.CPUStart
	frontier := hot
	for depth := 0; len(frontier) > 0 && (w.MaxDepth == 0 || depth < w.MaxDepth); depth++ {
		if ctx.Err() != nil || !w.alive() {
			break
		}
		before := len(w.Funcs)
		stats, err := w.level(ctx, depth, frontier)
		if err != nil {
			w.Funcs = w.Funcs[:before] // not instrumented: nothing measured
			return err
		}
		last := w.Levels[len(w.Levels)-1]
		if last.EndedBy != "period" && last.EndedBy != "time limit" {
			break
		}
		// The next frontier: this level's callers not seen yet.
		var next []Func
		seen := map[string]bool{}
		for _, fs := range stats {
			for _, c := range fs.Callers {
				k := c.key()
				if seen[k] || w.visited[k] != nil || stopNames[c.Name] || c.NoProbe != "" {
					continue
				}
				seen[k] = true
				next = append(next, c.Func)
			}
		}
		frontier = next
	}
	if w.budgetOn() && ctx.Err() == nil && w.alive() {
		// The last window's closing phase is paid for too: the walk
		// ends once its costs are within the aim.
		w.EndWaitSec = w.waitBudget(ctx, 0)
		if v, ok := w.tree.cpuNs(); ok {
			w.CPULast = v
		}
	}
	return nil
}

// budgetOn says whether the budget's rule decides when probes are in
// place (a budget, a calibration, and no fixed duty cycle).
func (w *Walk) budgetOn() bool {
	return w.Budget > 0 && w.Budget < 100 && w.Cal != nil && !(w.Duty > 0 && w.Duty < 100)
}

func (w *Walk) progress(format string, a ...any) {
	if w.Progress != nil {
		fmt.Fprintf(w.Progress, "hotspot: "+format+" elapsed %.1fs\n", append(a, time.Since(w.start).Seconds())...)
	}
}

// sharedFiles says whether a process outside the tree maps one of the
// files of stats (its /proc/PID/maps), or whether that cannot be told.
func (w *Walk) sharedFiles(stats []*FuncStat) bool {
	inTree := map[int]bool{}
	for _, p := range w.tree.processes() {
		inTree[p] = true
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return true
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || inTree[pid] {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/maps")
		if err != nil {
			continue // gone, or a kernel thread
		}
		for _, fs := range stats {
			if mapsExec(b, fs.Path) {
				return true
			}
		}
	}
	return false
}

// mapsExec says whether a /proc/PID/maps text maps path executable (a
// uprobe's breakpoint goes in executable mappings only: hotspot's own
// read-only mapping of the file, to read its symbols, is not one).
func mapsExec(maps []byte, path string) bool {
	for _, l := range bytes.Split(maps, []byte("\n")) {
		if !bytes.HasSuffix(l, []byte(" "+path)) {
			continue
		}
		if f := bytes.Fields(l); len(f) > 1 && bytes.IndexByte(f[1], 'x') >= 0 {
			return true
		}
	}
	return false
}

// budgetAim is the share of the budget the walk spends by its own count.
// The count covers the sampling, every probe hit (also while probes are
// being closed), each charged its calibrated cost; what it cannot count
// (the caches and TLB entries the traps and the probes' text page copies
// cost the target, the tool's CPU beside the target's on a shared core)
// takes the rest.
const budgetAim = 0.5

// aim is the fraction of the target's own CPU time the walk may cost.
func (w *Walk) aim() float64 { return w.Budget / 100 * budgetAim }

// totalCost is the walk's counted cost so far (ns of the target's CPU).
func (w *Walk) totalCost() float64 { return w.SampleCostNs + w.CostNs }

// withinBudget: the counted cost so far is at most aim x the target's own
// CPU time so far (its CPU time since sampling began, the cost taken out).
func (w *Walk) withinBudget() bool {
	return costWithin(w.totalCost(), w.meter.ns(), w.aim())
}

func costWithin(cost float64, cpuNs uint64, aim float64) bool {
	return cost <= aim*max(float64(cpuNs)-cost, 0)
}

// waitBudget waits until the walk can spend extra more within the budget
// (the target runs unprobed meanwhile), as long as that takes: a walk
// whose target ends first has ended with its costs within the budget. It
// returns the seconds waited.
func (w *Walk) waitBudget(ctx context.Context, extra float64) float64 {
	t0 := time.Now()
	lastScan := t0
	for ctx.Err() == nil && w.alive() {
		w.meter.update(w.meterTid)
		if w.affordable(extra) {
			break
		}
		if time.Since(lastScan) >= 100*time.Millisecond {
			lastScan = time.Now()
			if tids, err := w.tree.threads(); err == nil {
				w.meterTid = tids
			}
		}
		_, _ = unix.Poll(nil, 20)
	}
	return time.Since(t0).Seconds()
}

// what lists the probes of a level: each function with its exits.
func what(stats []*FuncStat) string {
	var parts []string
	for _, fs := range stats {
		exits := "exits"
		if len(fs.exits) == 1 {
			exits = "exit"
		}
		parts = append(parts, fmt.Sprintf("%s (entry and %d %s)", fs.Name, len(fs.exits), exits))
	}
	return strings.Join(parts, ", ")
}

// dropExit stops probing exit i of fs, which the kernel refused (err).
func (fs *FuncStat) dropExit(i int, err error) {
	fs.exits = append(fs.exits[:i:i], fs.exits[i+1:]...)
	fs.ExitProbes = len(fs.exits)
	fs.ExitsUnprobed++
	if len(fs.exits) == 0 {
		fs.ExitsNote = "the kernel refused a probe on its exits: " + err.Error()
		fs.costNs = fs.entryNs
	}
}

// stackOf is the stack a hit of fs ran on: its thread's.
func (fs *FuncStat) stackOf(s uprobe.Sample) stackKey {
	return stackKey{id: s.TID}
}

// addTime adds a call's time: raw, from the entry's sample to the exit's,
// less the probes' own time in it (the pair's own traps, Calibration.InPairNs,
// and nested, the probed calls made from it).
func (fs *FuncStat) addTime(raw uint64, nested float64) {
	fs.sumRawNs += float64(raw)
	ns := uint64(max(float64(raw)-fs.pairNs-nested, 0))
	if len(fs.kept) < maxKept {
		fs.kept = append(fs.kept, float64(ns))
	}
	if fs.Returns == 0 || ns < fs.MinNs {
		fs.MinNs = ns
	}
	if ns > fs.MaxNs {
		fs.MaxNs = ns
	}
	fs.Returns++
	fs.sumNs += float64(ns)
}

// addMetric adds one call's metric; called after addTime (Returns counted).
// A clock metric (task-clock: the thread's CPU time, the traps' kernel
// time included) has the probes' own time taken out as the wall time has
// (clock).
func (fs *FuncStat) addMetric(raw uint64, nested float64, clock bool) {
	v := raw
	if clock {
		v = uint64(max(float64(raw)-fs.pairNs-nested, 0))
	}
	if len(fs.keptMetric) < maxKept {
		fs.keptMetric = append(fs.keptMetric, float64(v))
	}
	if fs.Returns == 1 || v < fs.MetricMin {
		fs.MetricMin = v
	}
	if v > fs.MetricMax {
		fs.MetricMax = v
	}
	fs.sumMetric += float64(v)
}

func (fs *FuncStat) finish() {
	fs.FewPairs = fs.ExitProbes > 0 && fs.Returns < minPairs
	if fs.Returns > 0 {
		fs.MeanNs = math.Round(fs.sumNs / float64(fs.Returns))
		fs.MeanRawNs = math.Round(fs.sumRawNs / float64(fs.Returns))
		fs.MedianNs, fs.MetricMedian = median(fs.kept), median(fs.keptMetric)
		fs.kept, fs.keptMetric = nil, nil
		fs.MetricMean = math.Round(fs.sumMetric / float64(fs.Returns))
	}
	var total uint64
	for _, c := range fs.callers {
		total += c.Calls
	}
	fs.Callers = fs.Callers[:0]
	for _, c := range fs.callers {
		c.Share = float64(c.Calls) / float64(total)
		fs.Callers = append(fs.Callers, c)
	}
	sort.Slice(fs.Callers, func(i, j int) bool {
		if fs.Callers[i].Calls != fs.Callers[j].Calls {
			return fs.Callers[i].Calls > fs.Callers[j].Calls
		}
		return fs.Callers[i].Name < fs.Callers[j].Name
	})
}
