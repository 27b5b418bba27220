package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"perfinsp/internal/perfring"
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
	Level   int     `json:"level"`
	Calls   uint64  `json:"calls"`   // entries seen
	Returns uint64  `json:"returns"` // entries matched with their return
	Cut     uint64  `json:"cut"`     // entries whose return came after their probes were removed
	MeanNs  float64 `json:"mean_ns"`
	MinNs   uint64  `json:"min_ns"`
	MaxNs   uint64  `json:"max_ns"`
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
}

// Level is one step of the walk.
type Level struct {
	Level    int      `json:"level"`
	Frontier []string `json:"frontier"`
	// Probes is the number of probe events open during the level (two per
	// function and thread); PerfFDs the perf event fds the tool held open
	// at that moment, counted from /proc/self/fd.
	Probes     int     `json:"active_probes"`
	PerfFDs    int     `json:"perf_fds_open"`
	Calls      uint64  `json:"calls"`
	Seconds    float64 `json:"seconds"`
	EndedBy    string  `json:"ended_by"` // "period", "time limit", "target exited", "signal"
	Skipped    []Func  `json:"not_instrumented,omitempty"`
	PerfFDsEnd int     `json:"perf_fds_after_close"`
	Windows    int     `json:"windows"` // times the probes were put in place (duty cycle)
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
	// CloseHits are the entry hits while the level's probes were being
	// closed (each close waits for the kernel's grace periods while the
	// probes still open trap): charged, not counted as calls.
	CloseHits uint64 `json:"close_hits"`
	// BudgetWaitSec is how long the level waited for the walk's costs so
	// far to fall within the budget before its probes first went in.
	BudgetWaitSec float64 `json:"budget_wait_s,omitempty"`
	// CloseSec is the time spent closing probes (the kernel's grace
	// periods: tens of milliseconds a probe, more under load).
	CloseSec float64 `json:"close_s"`
	pids     map[uint32]int
}

// Walk is the state of a hot-spot walk.
type Walk struct {
	PMU    uprobe.PMU
	PID    int
	Period Period
	Duty   float64 // percent of the time a level's probes are in place (0 or 100: always)
	// Budget, in percent, bounds the target's slowdown when Duty is not
	// set: from the calls seen while the probes are in place, the cost of
	// probed call and the target's CPU time, the probes are removed for as
	// long as it takes the probe cost to fall to Budget % of the target's
	// CPU time (0: no budget).
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
	// CostNs is the estimated cost of those calls and of the entry hits
	// while probes were being closed (CloseHits): each one charged the
	// calibrated cost of its function's kind of first instruction.
	CostNs        float64
	CloseHits     uint64
	lastCloseCost float64 // the cost of the last closing phase
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
	stopAt            map[string]bool // names where the walk stops (main)
}

type probeRef struct {
	fs  *FuncStat
	ret bool
}

type frame struct {
	fs *FuncStat
	t  uint64
	v  uint64 // the metric at entry
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
		if ctx.Err() != nil || !w.Alive() {
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
	return nil
}

func (w *Walk) progress(format string, a ...any) {
	if w.Progress != nil {
		fmt.Fprintf(w.Progress, "hotspot: "+format+" elapsed %.1fs\n", append(a, time.Since(w.start).Seconds())...)
	}
}

// level instruments frontier until the period is over, then removes every
// probe of the level.
func (w *Walk) level(ctx context.Context, depth int, frontier []Func) ([]*FuncStat, error) {
	lv := Level{Level: depth, pids: map[uint32]int{}}
	var stats []*FuncStat
	for _, f := range frontier {
		if f.NoProbe != "" {
			lv.Skipped = append(lv.Skipped, f)
			continue
		}
		fs := &FuncStat{Func: f, Level: depth, callers: map[string]*CallerStat{}}
		if w.Cal != nil {
			fs.costNs, fs.entryNs = w.Cal.cost(f.Path, f.Off)
		}
		stats = append(stats, fs)
		w.visited[f.key()] = fs
		w.Funcs = append(w.Funcs, fs)
		lv.Frontier = append(lv.Frontier, f.Name)
	}
	if len(stats) == 0 {
		lv.EndedBy = "nothing instrumentable"
		w.Levels = append(w.Levels, lv)
		return nil, nil
	}
	var probes []*uprobe.Probe
	var rings []*perfring.Ring
	owners := map[*uprobe.Probe]bool{} // the probes whose fd a ring maps
	var leaders []int                  // the metric's counters, one per thread
	refs := map[uint64]probeRef{}
	stacks := map[uint32][]frame{}
	drain := func() {}
	closing := false
	// closeAll removes the probes. Each close waits for the kernel's grace
	// periods (tens of milliseconds, one close at a time machine-wide), and
	// a function's breakpoint stays while any probe of it is open: the
	// probes still open keep trapping meanwhile. So the return probes go
	// first (an entry probe alone costs the entry trap only), the rings
	// stay mapped and are read between closes, and each entry hit of this
	// phase is charged (CloseHits); the rings' own probes (entry probes)
	// go last, after their rings are unmapped.
	closeAll := func() {
		closing = true
		cost0, had, t0 := w.CostNs, len(probes) > 0, time.Now()
		for pass := 0; pass < 2; pass++ { // return probes, then entry probes
			for _, p := range probes {
				if p.Ret == (pass == 0) && !owners[p] {
					p.Close()
					drain()
				}
			}
		}
		drain()
		for _, r := range rings {
			w.Lost += r.Lost
			r.Close() // a mapping holds its event alive: the owner's close below ends it
		}
		for _, p := range probes {
			p.Close()
		}
		for _, fd := range leaders {
			unix.Close(fd)
		}
		rings, probes, leaders = nil, nil, nil
		clear(owners)
		closing = false
		if had {
			w.lastCloseCost = w.CostNs - cost0
			lv.CloseSec += time.Since(t0).Seconds()
		}
		// Calls entered in this window whose return it did not see.
		for tid, st := range stacks {
			for _, f := range st {
				f.fs.Cut++
			}
			delete(stacks, tid)
		}
	}
	defer closeAll()
	var winCost float64 // the probe cost of the calls seen in this window
	probed := map[int]bool{}
	// openThreads puts the level's probes on threads tids and enables them.
	openThreads := func(tids []int) error {
		p0, l0 := len(probes), len(leaders)
		for _, tid := range tids {
			probed[tid] = true
			var ring *perfring.Ring
			group := -1
			if w.Metric != nil {
				fd, err := uprobe.OpenCounter(*w.Metric, tid)
				if err != nil {
					if errors.Is(err, unix.ESRCH) {
						continue
					}
					return fmt.Errorf("-m %s: %w", w.Metric.Name, err)
				}
				leaders = append(leaders, fd)
				group = fd
			}
			for _, fs := range stats {
				for _, ret := range []bool{false, true} {
					p, err := w.PMU.OpenWith(fs.Path, fs.Off, ret, tid, uprobe.OpenOpts{Disabled: true, Group: group})
					if err != nil {
						if errors.Is(err, unix.ESRCH) {
							continue
						}
						return fmt.Errorf("instrument %s: %w", fs.Name, err)
					}
					probes = append(probes, p)
					refs[p.ID] = probeRef{fs, ret}
					if ring == nil {
						if ring, err = perfring.Map(p.FD, 64); err != nil {
							return err
						}
						rings = append(rings, ring)
						owners[p] = true
					} else if err := ring.Redirect(p.FD); err != nil {
						return err
					}
				}
			}
		}
		for _, p := range probes[p0:] {
			if err := uprobe.Enable(p.FD); err != nil {
				return err
			}
		}
		for _, fd := range leaders[l0:] { // a group counts once its leader is on
			if err := uprobe.Enable(fd); err != nil {
				return err
			}
		}
		return nil
	}
	openAll := func() (bool, error) {
		tids, err := w.tree.threads()
		if err != nil {
			return false, nil // the target is gone
		}
		clear(probed)
		if err := openThreads(tids); err != nil {
			return false, err
		}
		lv.Windows++
		w.meterTid = tids
		winCost = 0
		return len(probes) > 0, nil
	}
	// attachNew follows the tree: threads and processes created since the
	// probes went in get them too (polled: a child's calls before its
	// first poll, within 100 ms, are not seen).
	attachNew := func() error {
		tids, err := w.tree.threads()
		if err != nil {
			return nil
		}
		var fresh []int
		for _, tid := range tids {
			if !probed[tid] {
				fresh = append(fresh, tid)
			}
		}
		if len(fresh) == 0 {
			return nil
		}
		lv.Attached += len(fresh)
		return openThreads(fresh)
	}
	drain = func() {
		for _, r := range rings {
			r.Drain(func(typ uint32, _ uint16, b []byte) {
				if typ != unix.PERF_RECORD_SAMPLE {
					return
				}
				id, ok := uprobe.SampleID(b)
				if !ok {
					return
				}
				ref, ok := refs[id]
				if !ok {
					return
				}
				s, ok := uprobe.Decode(b, uprobe.Layout{Stack: !ref.ret, Read: w.Metric != nil})
				if !ok {
					return
				}
				w.HookHits++
				if closing && !ref.ret {
					// The probes are being closed: the hit costs the
					// target, its call is not followed (its return
					// probe is gone).
					lv.CloseHits++
					w.CloseHits++
					w.CostNs += ref.fs.entryNs
					return
				}
				if lv.pids[s.PID] == 0 {
					lv.PIDs = append(lv.PIDs, int(s.PID))
				}
				lv.pids[s.PID]++
				if !ref.ret {
					w.Entries++
					w.CostNs += ref.fs.costNs
					winCost += ref.fs.costNs
					ref.fs.Calls++
					lv.Calls++
					if s.HasTop {
						c := w.tree.lookup(int(s.PID), s.TopWord)
						cs := ref.fs.callers[c.key()+c.Name]
						if cs == nil {
							cs = &CallerStat{Func: c}
							ref.fs.callers[c.key()+c.Name] = cs
						}
						cs.Calls++
					}
					st := stacks[s.TID]
					if len(st) < 4096 {
						stacks[s.TID] = append(st, frame{ref.fs, s.Time, s.Read})
					}
					return
				}
				if closing {
					// A return while the probes are being closed: its
					// return trap is charged here, its entry trap was
					// charged with the entry.
					w.CostNs += ref.fs.costNs - ref.fs.entryNs
				}
				st := stacks[s.TID]
				for i := len(st) - 1; i >= 0 && i >= len(st)-64; i-- {
					if st[i].fs == ref.fs {
						ref.fs.addTime(s.Time - st[i].t)
						if w.Metric != nil {
							ref.fs.addMetric(s.Read - st[i].v)
						}
						stacks[s.TID] = st[:i]
						return
					}
				}
			})
		}
	}
	// Duty cycle: probes on for onWin, off for offWin (duty < 100 %); the
	// budget (below) decides by its rule instead.
	const onWin = 100 * time.Millisecond
	var offWin time.Duration
	if w.Duty > 0 && w.Duty < 100 {
		offWin = time.Duration(float64(onWin) * (100 - w.Duty) / w.Duty)
	}
	budget := w.Budget > 0 && w.Budget < 100 && w.Cal != nil && !(w.Duty > 0 && w.Duty < 100)
	if budget {
		// The walk's costs so far (the sampling, the levels before) are
		// paid for first.
		lv.BudgetWaitSec = w.waitBudget(ctx)
	}
	ok, err := openAll()
	if err != nil {
		return nil, err
	}
	if !ok {
		lv.EndedBy = "target exited"
		w.Levels = append(w.Levels, lv)
		return stats, nil
	}
	lv.Probes = len(probes)
	lv.PerfFDs = perfFDs()
	w.progress("level %d frontier [%s] active probes %d", depth, strings.Join(lv.Frontier, " "), lv.Probes)

	cpu0, _ := w.tree.cpuNs()
	cost0 := w.CostNs
	t0 := time.Now()
	winStart := t0
	on := true
	lastProgress := t0
	lastScan := t0
	for {
		drain()
		switch {
		case ctx.Err() != nil:
			lv.EndedBy = "signal"
		case w.Period.Calls > 0 && lv.Calls >= w.Period.Calls:
			lv.EndedBy = "period"
		case w.Period.Duration > 0 && time.Since(t0) >= w.Period.Duration:
			lv.EndedBy = "period"
		case !w.Alive():
			lv.EndedBy = "target exited"
		case w.LevelMax > 0 && time.Since(t0) >= w.LevelMax:
			lv.EndedBy = "time limit"
		}
		if lv.EndedBy != "" {
			break
		}
		switch {
		case budget && on:
			if w.windowOver(time.Since(winStart), winCost, onWin) {
				w.meter.update(w.meterTid)
				if w.withinBudget() {
					// The probes stay; a new window starts.
					winStart, winCost = time.Now(), 0
				} else {
					closeAll()
					on, winStart = false, time.Now()
				}
			}
		case budget && !on:
			w.meter.update(w.meterTid)
			if w.withinBudget() {
				if _, err := openAll(); err != nil {
					return nil, err
				}
				on, winStart = true, time.Now()
			}
		case offWin > 0 && on && time.Since(winStart) >= onWin:
			// The off time counts from the start of the closing (which
			// takes tens of milliseconds a probe, more on a loaded host).
			t := time.Now()
			closeAll()
			on, winStart = false, t
		case offWin > 0 && !on && time.Since(winStart) >= offWin:
			if _, err := openAll(); err != nil {
				return nil, err
			}
			on, winStart = true, time.Now()
		}
		if time.Since(lastScan) >= 100*time.Millisecond {
			lastScan = time.Now()
			if on {
				if err := attachNew(); err != nil {
					return nil, err
				}
			} else if tids, err := w.tree.threads(); err == nil {
				w.meterTid = tids
			}
			w.meter.update(w.meterTid)
			if v, ok := w.tree.cpuNs(); ok {
				w.CPULast = v
			}
		}
		if time.Since(lastProgress) >= time.Second {
			lastProgress = time.Now()
			w.progress("level %d frontier [%s] active probes %d calls %d", depth, strings.Join(lv.Frontier, " "), len(probes), lv.Calls)
		}
		// A window of the budget is read every 2 ms: a hot function's
		// window reaches its cost in a few ms (the probes wake the poll
		// only every 256 hits).
		wait := 20
		if budget && on {
			wait = 2
		}
		if len(probes) > 0 {
			_, _ = unix.Poll([]unix.PollFd{{Fd: int32(probes[0].FD), Events: unix.POLLIN}}, wait)
		} else {
			_, _ = unix.Poll(nil, wait)
		}
	}
	drain()
	closeAll()
	w.meter.update(w.meterTid)
	lv.PerfFDsEnd = perfFDs()
	if w.CPULast > cpu0 {
		lv.TargetCPUNs = w.CPULast - cpu0
	}
	lv.CostNs = w.CostNs - cost0
	lv.Seconds = time.Since(t0).Seconds()
	w.Levels = append(w.Levels, lv)
	for _, fs := range stats {
		fs.finish()
	}
	return stats, nil
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

// windowOver ends a window of the budget: after onWin with the probes in
// place, or earlier once its cost reaches the aim's share of onWin (a
// function called very often) — or twice the cost of the last closing
// phase if that is more: each window ends with one (the probes trap while
// they are closed), so a window is worth at least twice what closing it
// costs.
func (w *Walk) windowOver(elapsed time.Duration, winCost float64, onWin time.Duration) bool {
	return elapsed >= onWin || winCost >= max(w.aim()*float64(onWin), 2*w.lastCloseCost)
}

// maxBudgetWait bounds a level's wait for the costs so far to be paid.
const maxBudgetWait = 5 * time.Second

// waitBudget waits until the walk's costs so far are within the budget
// (the target runs unprobed meanwhile), at most maxBudgetWait; it returns
// the seconds waited.
func (w *Walk) waitBudget(ctx context.Context) float64 {
	t0 := time.Now()
	lastScan := t0
	for time.Since(t0) < maxBudgetWait && ctx.Err() == nil && w.Alive() {
		w.meter.update(w.meterTid)
		if w.withinBudget() {
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

func (fs *FuncStat) addTime(ns uint64) {
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
func (fs *FuncStat) addMetric(v uint64) {
	if fs.Returns == 1 || v < fs.MetricMin {
		fs.MetricMin = v
	}
	if v > fs.MetricMax {
		fs.MetricMax = v
	}
	fs.sumMetric += float64(v)
}

func (fs *FuncStat) finish() {
	if fs.Returns > 0 {
		fs.MeanNs = math.Round(fs.sumNs / float64(fs.Returns))
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
