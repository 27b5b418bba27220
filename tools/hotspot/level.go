package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"perfinsp/internal/perfring"
	"perfinsp/libperfutil/events"
	"perfinsp/libperfutil/uprobe"
)

// levelRun is one level of the walk while it runs: its functions, the
// probes in place and the rings they write into, and the pairing of their
// hits. A level puts its probes in (openAll), reads their hits (drain)
// until its period is over, in one window or several (the duty cycle, the
// budget), and removes every probe (closeAll).
type levelRun struct {
	w     *Walk
	ctx   context.Context
	depth int
	lv    Level
	stats []*FuncStat

	probes   []*uprobe.Probe
	dyn      *uprobe.Dynamic // the level's probed instructions, if tracefs can hold them
	rings    []*perfring.Ring
	holders  []int // the dummy events holding the rings, one per thread or CPU
	leaders  []int // the metric's counters, one per thread (they hold the rings)
	siteHits map[probeSite]uint64
	refs     map[uint64]probeRef
	stacks   callStacks
	probed   map[int]bool // the threads probed in this window

	// cpus, if set, are the CPUs the probes are opened on for every
	// process (perCPU); inTree the target's processes then (hits of
	// others are ignored).
	cpus   []int
	inTree map[uint32]bool

	closing bool      // closeAll is removing the probes
	onSince time.Time // when the probes went in
	winCost float64   // the probe cost of the calls seen in this window

	// counted: the traps are counted from the probes' events (traps.go),
	// not from the records read (with -m, whose probes read a group).
	counted  bool
	traps    map[*uprobe.Probe]*trapCount
	shares   map[probeSite]siteShare
	winSite  map[probeSite]float64 // each site's cost in this window
	cpuRate  float64               // the target's CPU ns per ns in this window (the traps' ceiling)
	openCost float64               // w.CostNs when this window's probes went in
}

// The duty cycle's window: probes on for onWin, off for offWin.
const onWin = 100 * time.Millisecond

// newLevelRun prepares a level on frontier: one FuncStat per function
// that can be instrumented (its exits found, its costs from the
// calibration), the others listed as skipped.
func newLevelRun(ctx context.Context, w *Walk, depth int, frontier []Func) *levelRun {
	r := &levelRun{
		w: w, ctx: ctx, depth: depth,
		lv:       Level{Level: depth, pids: map[uint32]int{}},
		siteHits: map[probeSite]uint64{},
		refs:     map[uint64]probeRef{},
		stacks:   callStacks{},
		probed:   map[int]bool{},
		inTree:   map[uint32]bool{},
		counted:  w.Metric == nil,
		traps:    map[*uprobe.Probe]*trapCount{},
		shares:   map[probeSite]siteShare{},
		winSite:  map[probeSite]float64{},
		cpuRate:  float64(max(runtime.NumCPU(), 1)),
	}
	for _, f := range frontier {
		if f.NoProbe != "" {
			r.lv.Skipped = append(r.lv.Skipped, f)
			continue
		}
		fs := &FuncStat{Func: f, Level: depth, callers: map[string]*CallerStat{}}
		plan := findExits(f.Path, f.Off, f.Size)
		fs.exits, fs.ExitProbes, fs.ExitsUnprobed, fs.ExitsNote = plan.Offs, len(plan.Offs), plan.Unprobed, plan.Why
		if w.Cal != nil {
			fs.costNs, fs.entryNs = w.Cal.cost(f.Path, f.Off)
			fs.pairNs = w.Cal.inPair(f.Path, f.Off)
			if len(fs.exits) == 0 {
				fs.costNs = fs.entryNs
			}
		}
		r.stats = append(r.stats, fs)
		w.visited[f.key()] = fs
		w.Funcs = append(w.Funcs, fs)
		r.lv.Frontier = append(r.lv.Frontier, f.Name)
	}
	return r
}

// level instruments frontier until the period is over, then removes every
// probe of the level.
func (w *Walk) level(ctx context.Context, depth int, frontier []Func) ([]*FuncStat, error) {
	r := newLevelRun(ctx, w, depth, frontier)
	if len(r.stats) == 0 {
		r.lv.EndedBy = "nothing instrumentable"
		w.Levels = append(w.Levels, r.lv)
		return nil, nil
	}
	r.dyn = openDynamic()
	r.lv.Dynamic = r.dyn != nil
	w.dyn = r.dyn
	defer r.closeDynamic()
	defer r.closeAll()
	return r.run()
}

// openDynamic is a set of dynamic events for a level's probes, nil (the
// uprobe PMU) where tracefs cannot hold them.
func openDynamic() *uprobe.Dynamic {
	d, err := uprobe.OpenDynamic(events.System)
	if err != nil {
		return nil
	}
	return d
}

// closeDynamic removes the level's dynamic events once its probes are
// closed: their anchors' closes wait for grace periods, with no breakpoint
// left in the target.
func (r *levelRun) closeDynamic() {
	if r.dyn == nil {
		return
	}
	t0 := time.Now()
	_ = r.dyn.Close()
	r.lv.AnchorCloseSec = time.Since(t0).Seconds()
	r.dyn, r.w.dyn = nil, nil
}

// choosePerCPU decides whether the probes are opened once per CPU for
// every process (tid -1) rather than once per thread: when that is no
// more events, or when the tree has several processes (children come and
// go, each would need its own probes, closed one grace period each even
// after it exited), and no process outside the tree maps the level's
// files (sharedFiles). A probe's close of the uprobe PMU waits for a
// kernel grace period, one close at a time machine-wide, and the probes
// still open trap meanwhile, so fewer events end a window's closing phase
// sooner (with dynamic events, closes are quick but fewer are still less). Hits of
// processes outside the tree (one that maps the file later) are not
// counted. Not with -m (a counter per thread leads its probes).
func (r *levelRun) choosePerCPU() {
	w := r.w
	all, err := events.OnlineCPUs()
	if err != nil || w.Metric != nil {
		return
	}
	tids, err := w.tree.threads()
	if err == nil && (len(all) <= len(tids) || len(w.tree.processes()) > 1) && !w.sharedFiles(r.stats) {
		r.cpus = all
		r.lv.PerCPU = true
	}
}

// refreshTree reads the tree's processes (perCPU: whose hits count).
func (r *levelRun) refreshTree() {
	clear(r.inTree)
	for _, p := range r.w.tree.processes() {
		r.inTree[uint32(p)] = true
	}
}

// probeUnit is where one ring's probes go: a thread (cpu -1) or, perCPU,
// a CPU for every process (tid -1).
type probeUnit struct{ tid, cpu int }

// openThreads puts the level's probes on threads tids (or, perCPU, on
// every CPU) and enables them.
func (r *levelRun) openThreads(tids []int) error {
	p0, l0 := len(r.probes), len(r.leaders)
	var units []probeUnit
	if r.cpus != nil {
		for _, c := range r.cpus {
			units = append(units, probeUnit{-1, c})
		}
		r.refreshTree()
	} else {
		for _, tid := range tids {
			units = append(units, probeUnit{tid, -1})
		}
	}
	for _, u := range units {
		if err := r.openUnit(u); err != nil {
			return err
		}
	}
	for _, p := range r.probes[p0:] {
		if err := uprobe.Enable(p.FD); err != nil {
			return err
		}
	}
	for _, fd := range r.leaders[l0:] { // a group counts once its leader is on
		if err := uprobe.Enable(fd); err != nil {
			return err
		}
	}
	return nil
}

// openUnit opens the ring of u, held by the metric's counter or a dummy
// event (the probes then close in any order: closeAll), and every
// function's probes on u, written into it. A thread gone meanwhile is
// skipped.
func (r *levelRun) openUnit(u probeUnit) error {
	w := r.w
	r.probed[u.tid] = true
	group := -1
	var holder int
	if w.Metric != nil {
		fd, err := uprobe.OpenCounter(*w.Metric, u.tid)
		if err != nil {
			if errors.Is(err, unix.ESRCH) {
				return nil
			}
			return fmt.Errorf("-m %s: %w", w.Metric.Name, err)
		}
		r.leaders = append(r.leaders, fd)
		group, holder = fd, fd
	} else {
		fd, err := uprobe.OpenHolder(u.tid, u.cpu)
		if err != nil {
			if errors.Is(err, unix.ESRCH) {
				return nil
			}
			return err
		}
		r.holders = append(r.holders, fd)
		holder = fd
	}
	ring, err := perfring.Map(holder, 64)
	if err != nil {
		return err
	}
	r.rings = append(r.rings, ring)
	for _, fs := range r.stats {
		if err := r.openFunc(fs, u, group, ring); err != nil {
			return err
		}
	}
	return nil
}

// openFunc opens fs's entry probe, then one probe per exit (never a
// uretprobe: exits.go), on u, into ring. An exit the kernel refuses to
// probe is dropped (fs.dropExit), not the end of the walk.
func (r *levelRun) openFunc(fs *FuncStat, u probeUnit, group int, ring *perfring.Ring) error {
	for i := -1; i < len(fs.exits); i++ {
		off, exit := fs.Off, i >= 0
		if exit {
			off = fs.exits[i]
		}
		p, err := r.w.PMU.OpenWith(fs.Path, off, false, u.tid, uprobe.OpenOpts{Disabled: true, Group: group, Exit: exit, Regs: probeRegs, CPU: u.cpu, Dynamic: r.dyn})
		if err != nil {
			if errors.Is(err, unix.ESRCH) {
				continue
			}
			if exit && !errors.Is(err, uprobe.ErrPerm) {
				// The kernel refuses a probe on this instruction: the
				// exit is not probed.
				fs.dropExit(i, err)
				i--
				continue
			}
			return fmt.Errorf("instrument %s: %w", fs.Name, err)
		}
		r.probes = append(r.probes, p)
		r.refs[p.ID] = probeRef{fs, exit, off}
		r.track(p, probeSite{fs, off})
		if err := ring.Redirect(p.FD); err != nil {
			return err
		}
	}
	return nil
}

// openAll puts a window's probes in on every thread of the tree; false
// if the target is gone or nothing could be probed.
func (r *levelRun) openAll() (bool, error) {
	w := r.w
	tids, err := w.tree.threads()
	if err != nil {
		return false, nil // the target is gone
	}
	clear(r.probed)
	t0 := time.Now()
	if err := r.openThreads(tids); err != nil {
		return false, err
	}
	r.lv.OpenSec += time.Since(t0).Seconds()
	r.lv.Windows++
	r.onSince = time.Now()
	r.openCost = w.CostNs
	clear(r.winSite)
	w.inPlace = fmt.Sprintf("during level %d, probes in place on %s", r.depth, what(r.stats))
	w.meterTid = tids
	r.winCost = 0
	return len(r.probes) > 0, nil
}

// attachNew follows the tree: threads and processes created since the
// probes went in get them too (polled: a child's calls before its first
// poll, within 100 ms, are not seen).
func (r *levelRun) attachNew() error {
	if r.cpus != nil { // every thread is probed: follow the tree's processes
		r.refreshTree()
		return nil
	}
	tids, err := r.w.tree.threads()
	if err != nil {
		return nil
	}
	var fresh []int
	for _, tid := range tids {
		if !r.probed[tid] {
			fresh = append(fresh, tid)
		}
	}
	if len(fresh) == 0 {
		return nil
	}
	r.lv.Attached += len(fresh)
	return r.openThreads(fresh)
}

// drain reads every ring.
func (r *levelRun) drain() {
	for _, ring := range r.rings {
		ring.Drain(r.record)
	}
}

// record takes one ring record: a probe hit of this level is counted,
// charged and, for an entry, its caller noted; entries and exits are
// paired per thread (callStacks).
func (r *levelRun) record(typ uint32, _ uint16, b []byte) {
	if typ != unix.PERF_RECORD_SAMPLE {
		return
	}
	id, ok := uprobe.SampleID(b)
	if !ok {
		return
	}
	ref, ok := r.refs[id]
	if !ok {
		return
	}
	s, ok := uprobe.Decode(b, uprobe.Layout{Stack: !ref.ret, Read: r.w.Metric != nil, Regs: 1})
	if !ok {
		return
	}
	if r.cpus != nil && !r.inTree[s.PID] {
		return // another process mapping the file
	}
	r.w.HookHits++
	if !r.counted {
		r.siteHits[probeSite{ref.fs, ref.off}]++
	}
	if ref.ret {
		r.exitHit(ref, s)
	} else {
		r.entryHit(ref, s)
	}
}

// entryHit is a hit of fs's first instruction.
func (r *levelRun) entryHit(ref probeRef, s uprobe.Sample) {
	w, lv := r.w, &r.lv
	if r.closing {
		// The probes are being closed: the hit costs the target, its
		// call is not followed (its exit probes may be gone).
		lv.CloseHits++
		w.CloseHits++
		if !r.counted {
			w.CostNs += ref.fs.entryNs
		}
		return
	}
	r.countPID(s.PID)
	w.Entries++
	if !r.counted {
		w.CostNs += ref.fs.costNs
		r.winCost += ref.fs.costNs
	}
	ref.fs.Calls++
	lv.Calls++
	if s.HasTop {
		// The return address: its call instruction is before it (a call
		// to a function that does not return may end its caller).
		c := w.tree.lookup(int(s.PID), s.TopWord-1)
		cs := ref.fs.callers[c.key()+c.Name]
		if cs == nil {
			cs = &CallerStat{Func: c}
			ref.fs.callers[c.key()+c.Name] = cs
		}
		cs.Calls++
	}
	if s.HasRegs {
		r.stacks.enter(ref.fs.stackOf(s), frame{fs: ref.fs, t: s.Time, v: s.Read, sp: s.Regs[0]})
	}
}

// exitHit is a hit of one of fs's exits: paired with its entry, the
// call's time (and metric) is added.
func (r *levelRun) exitHit(ref probeRef, s uprobe.Sample) {
	w, lv := r.w, &r.lv
	r.countPID(s.PID)
	if r.closing {
		// An exit while the probes are being closed: its trap is
		// charged here (its entry's with the entry).
		lv.CloseHits++
		w.CloseHits++
		if !r.counted {
			w.CostNs += ref.fs.costNs - ref.fs.entryNs
		}
	}
	if !s.HasRegs {
		return
	}
	if f, ok := r.stacks.exit(ref.fs.stackOf(s), ref.fs, s.Regs[0]); ok {
		ref.fs.addTime(s.Time-f.t, f.nested)
		if w.Metric != nil {
			ref.fs.addMetric(s.Read-f.v, f.nested, w.Metric.Unit == "ns")
		}
	}
}

// countPID notes a process whose probes were hit.
func (r *levelRun) countPID(pid uint32) {
	if r.lv.pids[pid] == 0 {
		r.lv.PIDs = append(r.lv.PIDs, int(pid))
	}
	r.lv.pids[pid]++
}

// closeOrder is the order the probes are closed in: the probed
// instructions whose hits cost most first — an instruction's breakpoint
// goes when its last event is closed, and an emulated entry costs far
// less than an exit (a return instruction is always single-stepped) —
// and of one instruction's events the busiest last.
func (r *levelRun) closeOrder() []*uprobe.Probe {
	bySite := map[probeSite][]*uprobe.Probe{}
	var sites []probeSite
	for _, p := range r.probes {
		ref := r.refs[p.ID]
		k := probeSite{ref.fs, ref.off}
		if bySite[k] == nil {
			sites = append(sites, k)
		}
		bySite[k] = append(bySite[k], p)
	}
	weight := func(k probeSite) float64 {
		if k.off == k.fs.Off {
			return float64(r.siteHits[k]) * k.fs.entryNs
		}
		return float64(r.siteHits[k]) * (k.fs.costNs - k.fs.entryNs)
	}
	sort.SliceStable(sites, func(i, j int) bool { return weight(sites[i]) > weight(sites[j]) })
	ps := make([]*uprobe.Probe, 0, len(r.probes))
	for _, k := range sites {
		// Within a site, the event that counted most closes last: until
		// then the site's breakpoint stays, and its hits stay counted.
		sort.SliceStable(bySite[k], func(i, j int) bool { return r.count(bySite[k][i]) < r.count(bySite[k][j]) })
		ps = append(ps, bySite[k]...)
	}
	return ps
}

// closeAll removes the probes (closeOrder; the rings read between
// closes, every hit of this phase charged: CloseHits), then unmaps the
// rings and closes their holders. The calls entered in this window whose
// exit it did not see are counted as cut.
func (r *levelRun) closeAll() {
	w, lv := r.w, &r.lv
	r.countTraps() // the window's last hits, before its closing phase
	r.closing = true
	had, t0 := len(r.probes) > 0, time.Now()
	if had {
		lv.OnSec += t0.Sub(r.onSince).Seconds()
		w.inPlace = fmt.Sprintf("during level %d, while its probes were being removed from %s", r.depth, what(r.stats))
	}
	for _, p := range r.closeOrder() {
		// The kernel removes a perf uprobe under one machine-wide lock
		// held across a grace period, unless a dynamic event's anchor
		// holds its instruction (uprobe.Dynamic): closes from several
		// threads only queue, so the order is what can be chosen
		// (closeOrder).
		t := time.Now()
		p.Close()
		w.noteClose(time.Since(t))
		r.closed(p)
		r.drain()
		r.countTraps()
	}
	r.drain()
	for _, ring := range r.rings {
		w.Lost += ring.Lost
		lv.lost += ring.Lost
		ring.Close()
	}
	for _, fd := range r.leaders {
		unix.Close(fd)
	}
	for _, fd := range r.holders {
		unix.Close(fd)
	}
	r.rings, r.probes, r.leaders, r.holders = nil, nil, nil, nil
	r.closing = false
	if had {
		w.inPlace = fmt.Sprintf("during level %d, its probes out (removed, not yet back)", r.depth)
		w.lastWindowCost = w.CostNs - r.openCost
		lv.CloseSec += time.Since(t0).Seconds()
	}
	clear(r.traps)
	clear(r.shares)
	for tid, st := range r.stacks {
		for _, f := range st {
			f.fs.Cut++
		}
		delete(r.stacks, tid)
	}
}

// endedBy says why the level ends now ("" while it goes on).
func (r *levelRun) endedBy(t0 time.Time) string {
	w := r.w
	switch {
	case r.ctx.Err() != nil:
		return "signal"
	case w.Period.Calls > 0 && r.lv.Calls >= w.Period.Calls:
		return "period"
	case w.Period.Duration > 0 && time.Since(t0) >= w.Period.Duration:
		return "period"
	case !w.alive():
		return "target exited"
	case w.LevelMax > 0 && time.Since(t0) >= w.LevelMax:
		return "time limit"
	}
	return ""
}

// windows decides when a level's probes are in place: always, by a duty
// cycle (on for onWin, off for offWin), or by the budget's rule.
type windows struct {
	budget   bool
	offWin   time.Duration
	on       bool
	winStart time.Time
	// cpu0 is the target's CPU time (the meter's) at cpuAt, in this
	// window: the traps' ceiling (levelRun.cpuRate) is measured from it.
	cpu0    uint64
	cpuAt   time.Time
	checked time.Time // the last check of the budget in a window (the first is budgetCheck in)
}

// budgetCheck: a budget window's meter is read at most this often.
const budgetCheck = 10 * time.Millisecond

// meterWindow reads the target's CPU time and, 20 ms into the window,
// its CPU rate: at most that much of the target's time goes to traps.
func (r *levelRun) meterWindow(ws *windows) {
	w := r.w
	w.meter.update(w.meterTid)
	if d := time.Since(ws.cpuAt); d >= 2*budgetCheck {
		r.cpuRate = max(float64(w.meter.ns()-ws.cpu0)/float64(d), 0.05)
	}
}

// newWindows is the windowing of w's levels.
func newWindows(w *Walk) windows {
	var ws windows
	if w.Duty > 0 && w.Duty < 100 {
		ws.offWin = time.Duration(float64(onWin) * (100 - w.Duty) / w.Duty)
	}
	ws.budget = w.budgetOn()
	return ws
}

// step puts the probes in or out as the windowing says.
func (r *levelRun) step(ws *windows) error {
	w := r.w
	switch {
	case ws.budget && ws.on:
		r.countTraps()
		if time.Since(ws.checked) < budgetCheck {
			return nil
		}
		ws.checked = time.Now()
		el := time.Since(ws.winStart)
		r.meterWindow(ws)
		// The window goes on while what it spent and what closing it now
		// would cost fit; at onWin a window that still fits goes on as a
		// new one (its probes stay: no closing phase to pay).
		if !w.affordable(r.predictClose(time.Since(r.onSince))) {
			r.closeAll()
			ws.on, ws.winStart = false, time.Now()
		} else if el >= onWin {
			ws.winStart, r.winCost = time.Now(), 0
		}
	case ws.budget && !ws.on:
		w.meter.update(w.meterTid)
		// A window is opened once the budget can pay for one like the
		// last (its traps and its closing phase).
		if w.affordable(w.lastWindowCost) {
			if _, err := r.openAll(); err != nil {
				return err
			}
			ws.on, ws.winStart = true, time.Now()
			ws.cpu0, ws.cpuAt, ws.checked = w.meter.ns(), ws.winStart, ws.winStart
		}
	case ws.offWin > 0 && ws.on && time.Since(ws.winStart) >= onWin:
		// The off time counts from the start of the closing (which takes
		// tens of milliseconds a probe, more on a loaded host).
		t := time.Now()
		r.closeAll()
		ws.on, ws.winStart = false, t
	case ws.offWin > 0 && !ws.on && time.Since(ws.winStart) >= ws.offWin:
		if _, err := r.openAll(); err != nil {
			return err
		}
		ws.on, ws.winStart = true, time.Now()
	}
	return nil
}

// scan follows the tree (new threads get the probes while they are in,
// new processes' mappings are read) and reads the target's CPU time.
func (r *levelRun) scan(on bool) error {
	w := r.w
	w.tree.readNew()
	if on {
		if err := r.attachNew(); err != nil {
			return err
		}
	} else if tids, err := w.tree.threads(); err == nil {
		w.meterTid = tids
	}
	w.meter.update(w.meterTid)
	if v, ok := w.tree.cpuNs(); ok {
		w.CPULast = v
	}
	return nil
}

// wait blocks until the probes have news or wait ms have passed.
func (r *levelRun) wait(ms int) {
	if len(r.probes) > 0 {
		_, _ = unix.Poll([]unix.PollFd{{Fd: int32(r.probes[0].FD), Events: unix.POLLIN}}, ms)
	} else {
		_, _ = unix.Poll(nil, ms)
	}
}

// run is the level from its first window to its end: the probes in,
// their hits read, windows opened and closed, until the level ends.
func (r *levelRun) run() ([]*FuncStat, error) {
	w, lv := r.w, &r.lv
	r.choosePerCPU()
	ws := newWindows(w)
	if ws.budget {
		// The walk's costs so far (the sampling, the levels before) are
		// paid for first.
		lv.BudgetWaitSec = w.waitBudget(r.ctx, w.lastWindowCost)
	}
	ok, err := r.openAll()
	if err != nil {
		return nil, err
	}
	if !ok {
		lv.EndedBy = "target exited"
		w.Levels = append(w.Levels, *lv)
		return r.stats, nil
	}
	lv.Probes = len(r.probes)
	lv.PerfFDs = w.probeFDs() - len(r.holders)
	w.progress("level %d frontier [%s] active probes %d", r.depth, strings.Join(lv.Frontier, " "), lv.Probes)

	cpu0, _ := w.tree.cpuNs()
	cost0 := w.CostNs
	t0 := time.Now()
	ws.on, ws.winStart = true, t0
	ws.cpu0, ws.cpuAt, ws.checked = w.meter.ns(), t0, t0
	lastProgress, lastScan := t0, t0
	for {
		r.drain()
		if lv.EndedBy = r.endedBy(t0); lv.EndedBy != "" {
			break
		}
		if err := r.step(&ws); err != nil {
			return nil, err
		}
		if time.Since(lastScan) >= 100*time.Millisecond {
			lastScan = time.Now()
			if err := r.scan(ws.on); err != nil {
				return nil, err
			}
		}
		if time.Since(lastProgress) >= time.Second {
			lastProgress = time.Now()
			w.progress("level %d frontier [%s] active probes %d calls %d", r.depth, strings.Join(lv.Frontier, " "), len(r.probes), lv.Calls)
		}
		// A window of the budget is read every 2 ms: a hot function's
		// window reaches its cost in a few ms (the probes wake the poll
		// only every 256 hits).
		if ws.budget && ws.on {
			r.wait(2)
		} else {
			r.wait(20)
		}
	}
	r.drain()
	if v, ok := w.tree.cpuNs(); ok { // to the level's end, not its last scan
		w.CPULast = v
	}
	r.closeAll()
	// The target's CPU to the end of the closing too: the level's cost
	// (CostNs) charges the traps taken while its probes were closed.
	if v, ok := w.tree.cpuNs(); ok {
		w.CPULast = v
	}
	r.closeDynamic()
	w.inPlace = fmt.Sprintf("after level %d, no probe in place", r.depth)
	w.meter.update(w.meterTid)
	lv.PerfFDsEnd = w.probeFDs()
	if w.CPULast > cpu0 {
		lv.TargetCPUNs = w.CPULast - cpu0
	}
	lv.CostNs = w.CostNs - cost0
	lv.Seconds = time.Since(t0).Seconds()
	w.Levels = append(w.Levels, *lv)
	for _, fs := range r.stats {
		fs.Lost = lv.lost
		fs.finish()
	}
	return r.stats, nil
}
