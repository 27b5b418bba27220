package callflow

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"perfinsp/analysis/pprofloc"
)

// Analysis is the calibrated call trees of one process, named.
type Analysis struct {
	Info  Info
	Cal   Calibration
	Trees []*Tree
	Proc  *Process
	// Err is the first error reading a thread file (its tree then covers
	// what was read, marked partial).
	Err error
	// Plain: the uninstrumented run's CPU time in metric units (SetPlain;
	// 0: not given). Residual: what the calibrated total keeps over it,
	// per recorded call.
	Plain, Residual float64
}

// SetPlain takes the CPU time (user + system, ns) of the same work run
// uninstrumented and sets the residual per call: (calibrated total - plain)
// / calls. ErrorBar then counts calls * |residual| for each function. Only
// for a metric that is a time (ns_per_unit in the info file).
func (a *Analysis) SetPlain(ns float64) error {
	if a.Info.NsPerUnit <= 0 {
		return fmt.Errorf("metric %s is no time: an uninstrumented run's CPU time does not compare with it", a.Info.Metric)
	}
	var calls uint64
	for _, t := range a.Trees {
		t.Root.Walk(func(n *Node) { calls += n.Calls })
	}
	if calls == 0 {
		return fmt.Errorf("no calls recorded: no residual per call")
	}
	a.Plain = ns / a.Info.NsPerUnit
	a.Residual = (float64(a.Total()) - a.Plain) / float64(calls)
	return nil
}

// Analyze builds every thread's tree with the inner / outer time measured
// at start-up and names the functions.
func Analyze(p *Process) *Analysis {
	return AnalyzeWith(p, StartupCalibration(p))
}

// StartupCalibration is the inner / outer time measured at start-up.
func StartupCalibration(p *Process) Calibration {
	return Calibration{Inner: p.Info.TInner, Outer: p.Info.TOuter, InnerAPI: p.Info.TInnerAPI, OuterAPI: p.Info.TOuterAPI}
}

// MinimaCalibration is the run's own sequence minima (the first pass),
// keyed k.
func MinimaCalibration(p *Process, k SeqKey) Calibration {
	return Calibration{Minima: SequenceMinima(p.Threads, k)}
}

// TrainedCalibration is this run's sequence minima merged with a trained
// table (per key the lower: keys this run saw rarely get the trainer's).
func TrainedCalibration(p *Process, trained *Minima, metric string) (Calibration, error) {
	if metric != p.Info.Metric {
		return Calibration{}, fmt.Errorf("the minima were trained with metric %s, this run used %s", metric, p.Info.Metric)
	}
	m := SequenceMinima(p.Threads, trained.Key)
	if err := m.Merge(trained); err != nil {
		return Calibration{}, err
	}
	m.Trained = true
	return Calibration{Minima: m}, nil
}

// AnalyzeWith is Analyze with a given calibration (zero: uncalibrated).
func AnalyzeWith(p *Process, cal Calibration) *Analysis {
	a := &Analysis{Info: p.Info, Cal: cal, Proc: p}
	nm := ProcessNamer(p)
	for _, t := range p.Threads {
		tr, err := BuildErr(t, cal)
		if err != nil && a.Err == nil {
			a.Err = err
		}
		tr.Root.Walk(func(n *Node) {
			if n.Parent != nil {
				n.Name = nm.Name(n.Fn)
			}
		})
		a.Trees = append(a.Trees, tr)
	}
	return a
}

func (a *Analysis) unit() string {
	switch a.Info.Metric {
	case "task-clock", "cpu-clock":
		return "ns"
	case "rdtsc", "tsc", "tsc-user":
		return "cycles"
	}
	return a.Info.Metric
}

// Total is the calibrated metric of every thread (the Cum of the roots).
func (a *Analysis) Total() uint64 {
	var s uint64
	for _, t := range a.Trees {
		s += t.Root.Cum
	}
	return s
}

func threadLabel(t *Tree) string { return fmt.Sprintf("tid_%d", t.TID) }

// writeDropped says how many events the runtime dropped, if any: the
// calls they belong to are missing from every report.
func (a *Analysis) writeDropped(w *bufio.Writer) {
	if a.Info.Dropped > 0 {
		fmt.Fprintf(w, " DROPPED: %d events not recorded (signal handlers that ran while the runtime itself was interrupted: inside a hook, or a thread's first event opening its files; a thread whose file failed counts once): their calls are missing from the counts\n", a.Info.Dropped)
	}
}

// WriteLogRT writes PI's log-rt: the call tree of each thread with
// LV CALLS CEE BASE DELTA DS IN NAME.
func (a *Analysis) WriteLogRT(out io.Writer) error {
	w := bufio.NewWriter(out)
	fmt.Fprintf(w, "perfinsp call flow (log-rt)  pid %d  %s\n", a.Info.PID, a.Info.Exe)
	fmt.Fprintf(w, " metric %s (%s, backend %s)\n", a.Info.Metric, a.unit(), a.Info.Backend)
	fmt.Fprintf(w, " start-up calibration: t_I %.2f per call, t_O %.2f per callee (minimum of 100 averages of 100 empty pairs; medians %.2f, %.2f)\n",
		a.Info.TInner, a.Info.TOuter, a.Info.TInnerMed, a.Info.TOuterMed)
	if a.Info.TPlain > 0 {
		fmt.Fprintf(w, " (t_O is net of the caller's own loop and call, %.2f per call measured uninstrumented)\n", a.Info.TPlain)
	}
	switch {
	case a.Cal.Minima != nil:
		m := a.Cal.Minima
		src := "this run's (two-pass)"
		if m.Trained {
			src = "this run's merged with a training file (per key the lower)"
		}
		if m.Env != nil {
			src += ", less the environmental overhead from the trainer's ITrace (adjusted = delta - (min - env))"
		}
		fmt.Fprintf(w, " applied: sequence minima, %s (key %s: M1-T1-M2-T2-M3), %d keys:\n", src, m.Key, len(m.Min))
		for _, k := range m.Keys() {
			env := ""
			if m.Env != nil {
				if e, ok := m.Env.Min[k]; ok {
					env = fmt.Sprintf(" env %d", e)
				} else {
					env = fmt.Sprintf(" env %d (not in the ITrace: assumed)", EnvDefault)
				}
			}
			fmt.Fprintf(w, "   %-52s min %d (%d seen)%s\n", m.Key.Name(k), m.Min[k], m.Count[k], env)
		}
	case a.Cal.Inner != 0 || a.Cal.Outer != 0:
		fmt.Fprintf(w, " applied: start-up calibration, exact = rough - t_I - callees * t_O\n")
	default:
		fmt.Fprintln(w, " applied: none (raw metric)")
	}
	fmt.Fprintln(w, " BASE: calibrated metric of the function itself; DELTA: what calibration removed (raw = BASE + DELTA)")
	a.writeDropped(w)
	if a.Info.DSIN == "kmod" {
		fmt.Fprintln(w, " DS / IN: dispatches / interrupts of the thread during the function itself (the pitrace module's PTT work area)")
	} else {
		fmt.Fprintf(w, " DS / IN: dispatches / interrupts: - (backend %s: they come from the pitrace module's PTT work area; without it `ptt dump` gives per-thread totals only)\n", a.Info.Backend)
	}
	sys := a.Info.HasSys()
	switch a.Info.Sys {
	case "in":
		fmt.Fprintf(w, " SYS / NSYS: the metric the function's own system calls took, part of BASE, and their number (%.0f per call of kernel entry and exit code included%s)\n", a.Info.SysGlue, a.Info.ResumeNote())
	case "out":
		fmt.Fprintf(w, " SYS / NSYS: the metric the function's own system calls took, not in BASE (metric %s counts user mode only), and their number (%.0f per call of kernel entry and exit code included%s)\n", a.Info.Metric, a.Info.SysGlue, a.Info.ResumeNote())
	}
	flt := a.Info.HasFaults()
	if flt {
		fmt.Fprintf(w, " FLT / NFLT: the metric the function's own page faults (user mode) took, %s BASE, and their number (%.0f per fault of exception entry and exit code included)\n",
			map[bool]string{true: "part of", false: "not in"}[a.Info.Faults == "in"], a.Info.FaultGlue)
	}
	cols := func(n *Node) string {
		ds, in := "-", "-"
		if a.Info.DSIN == "kmod" {
			ds, in = fmt.Sprint(n.DS), fmt.Sprint(n.IN)
		}
		s := fmt.Sprintf("%4s %4s", ds, in)
		if sys {
			s += fmt.Sprintf(" %12d %6d", n.Sys, n.SysN)
		}
		if flt {
			s += fmt.Sprintf(" %12d %6d", n.Flt, n.FltN)
		}
		return s
	}
	for _, t := range a.Trees {
		fmt.Fprintln(w)
		fmt.Fprintf(w, "Thread %d/%d  events %d  total BASE %d\n", t.PID, t.TID, t.Events, t.Root.Cum)
		if t.Life > 1 {
			fmt.Fprintf(w, " the OS thread's thread %d: attached to it after its thread %d ended (a JVM's DestroyJavaVM, a JNI attach)\n", t.Life, t.Life-1)
		}
		if t.Partial {
			fmt.Fprintln(w, " WARNING: the thread file was cut short (process killed or still running): figures cover what was recorded")
		}
		if t.Repaired > 0 || t.Unmatched > 0 || t.OpenAtEnd > 0 {
			fmt.Fprintf(w, " stack repair: %d frames closed without an exit (longjmp, exception), %d unmatched exits, %d frames open at the end\n",
				t.Repaired, t.Unmatched, t.OpenAtEnd)
		}
		if t.Adjusted > 0 {
			fmt.Fprintf(w, " runtime pauses left out: %d\n", t.Adjusted)
		}
		head := fmt.Sprintf("%4s %4s", "DS", "IN")
		if sys {
			head += fmt.Sprintf(" %12s %6s", "SYS", "NSYS")
		}
		if flt {
			head += fmt.Sprintf(" %12s %6s", "FLT", "NFLT")
		}
		fmt.Fprintf(w, " %3s %10s %10s %14s %12s %s  %s\n", "LV", "CALLS", "CEE", "BASE", "DELTA", head, "NAME")
		if t.Root.Base > 0 || t.Root.Delta != 0 || t.Root.SysN > 0 || t.Root.FltN > 0 {
			fmt.Fprintf(w, " %3d %10d %10d %14d %12d %s  %s\n", 0, 0, t.Root.Callees, t.Root.Base, t.Root.Delta, cols(t.Root), "(thread, outside instrumented functions)")
		}
		for _, c := range t.Root.Children {
			c.Walk(func(n *Node) {
				fmt.Fprintf(w, " %3d %10d %10d %14d %12d %s  ", n.Level, n.Calls, n.Callees, n.Base, n.Delta, cols(n))
				indent(w, n.Level-1)
				w.WriteString(n.Name)
				w.WriteByte('\n')
			})
		}
	}
	return w.Flush()
}

// indent writes n spaces (no string of them is made: a recursion 10,000
// deep indents by up to 10,000).
func indent(w *bufio.Writer, n int) {
	const spaces = "                                                                "
	for ; n > len(spaces); n -= len(spaces) {
		w.WriteString(spaces)
	}
	if n > 0 {
		w.WriteString(spaces[:n])
	}
}

// FlatRow is one function of log-gen.
type FlatRow struct {
	Name      string
	Calls     uint64
	Base, Cum uint64 // Cum: outermost activations only (recursion is not counted twice)
	Rough     uint64
	IN        uint64 // interrupts while it was on top (kmod backend; 0 elsewhere)
	// SysN, Sys: its own system calls and their metric (Info.HasSys).
	SysN, Sys uint64
	// FltN, Flt: its own user page faults and their metric (Info.HasFaults).
	FltN, Flt uint64
	Callees   uint64 // calls it made
	// Err is the error bar of Base (Analysis.ErrorBar).
	Err float64
}

// ErrorBar is how far the start-up calibration of calls activations
// making callees calls may be off: what each takes off is the minimum of
// 100 batch averages of empty pairs (t_I per call, t_O per callee), and a
// program's calls pay up to the median of those averages or more (the
// hooks' cache and branch-predictor state in real code). The bar is the
// spread between the two, per call and per callee: calls * (median t_I -
// t_I) + callees * (median t_O - t_O). 0 under the sequence minima or no
// calibration (exact metrics, or raw figures).
//
// With an uninstrumented run's CPU time (SetPlain) the bar also counts
// calls * |residual per call|: what the calibration left over the whole
// run (or took too much), spread over the calls.
func (a *Analysis) ErrorBar(calls, callees uint64) float64 {
	res := float64(calls) * math.Abs(a.Residual)
	if a.Cal.Minima != nil || (a.Cal.Inner == 0 && a.Cal.Outer == 0) {
		return res
	}
	in := a.Info
	return res + float64(calls)*max(in.TInnerMed-in.TInner, 0) + float64(callees)*max(in.TOuterMed-in.TOuter, 0)
}

// Flat aggregates every thread's tree by function.
func (a *Analysis) Flat() []FlatRow {
	rows := map[string]*FlatRow{}
	for _, t := range a.Trees {
		var visit func(n *Node, active map[string]int)
		visit = func(n *Node, active map[string]int) {
			if n.Parent != nil {
				r := rows[n.Name]
				if r == nil {
					r = &FlatRow{Name: n.Name}
					rows[n.Name] = r
				}
				r.Calls += n.Calls
				r.Callees += n.Callees
				r.Base += n.Base
				r.Rough += n.Rough
				r.IN += n.IN
				r.SysN += n.SysN
				r.Sys += n.Sys
				r.FltN += n.FltN
				r.Flt += n.Flt
				if active[n.Name] == 0 {
					r.Cum += n.Cum
				}
				active[n.Name]++
			}
			for _, c := range n.Children {
				visit(c, active)
			}
			if n.Parent != nil {
				active[n.Name]--
			}
		}
		visit(t.Root, map[string]int{})
		if t.Root.Base > 0 {
			r := rows["(outside)"]
			if r == nil {
				r = &FlatRow{Name: "(outside)"}
				rows["(outside)"] = r
			}
			r.Base += t.Root.Base
			r.Cum += t.Root.Base
			r.Rough += t.Root.Rough
			r.SysN += t.Root.SysN
			r.Sys += t.Root.Sys
			r.FltN += t.Root.FltN
			r.Flt += t.Root.Flt
		}
	}
	out := make([]FlatRow, 0, len(rows))
	for _, r := range rows {
		r.Err = a.ErrorBar(r.Calls, r.Callees)
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Base != out[j].Base {
			return out[i].Base > out[j].Base
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// WriteLogGen writes the flat table: calls, base, cumulative, % of base.
func (a *Analysis) WriteLogGen(out io.Writer) error {
	w := bufio.NewWriter(out)
	total := a.Total()
	fmt.Fprintf(w, "perfinsp call flow (log-gen)  pid %d  %s  metric %s (%s), calibrated\n", a.Info.PID, a.Info.Exe, a.Info.Metric, a.unit())
	fmt.Fprintf(w, " total BASE %d over %d threads\n", total, len(a.Trees))
	a.writeDropped(w)
	if a.Cal.Minima == nil && (a.Cal.Inner != 0 || a.Cal.Outer != 0) {
		fmt.Fprintf(w, " ERR: BASE's error bar, the start-up calibration's spread: calls * %.2f + callees * %.2f (median - minimum of t_I, t_O)\n",
			max(a.Info.TInnerMed-a.Info.TInner, 0), max(a.Info.TOuterMed-a.Info.TOuter, 0))
	}
	if a.Plain > 0 {
		fmt.Fprintf(w, " residual: calibrated total %d against %.0f for the uninstrumented run's CPU time: %+.2f %s per call; ERR includes calls * %.2f (the uninstrumented run's figure includes its start-up and exit, which the total leaves out)\n",
			total, a.Plain, a.Residual, a.unit(), math.Abs(a.Residual))
	}
	sys := a.Info.HasSys()
	if sys {
		fmt.Fprintf(w, " SYS / NSYS: the metric its own system calls took (%s BASE) and their number\n",
			map[bool]string{true: "part of", false: "not in"}[a.Info.Sys == "in"])
	}
	flt := a.Info.HasFaults()
	if flt {
		fmt.Fprintf(w, " FLT / NFLT: the metric its own page faults (user mode) took (%s BASE) and their number\n",
			map[bool]string{true: "part of", false: "not in"}[a.Info.Faults == "in"])
	}
	fmt.Fprintln(w)
	extra := func(r FlatRow) string {
		s := ""
		if sys {
			s += fmt.Sprintf(" %12d %8d", r.Sys, r.SysN)
		}
		if flt {
			s += fmt.Sprintf(" %12d %8d", r.Flt, r.FltN)
		}
		return s
	}
	head := ""
	if sys {
		head = fmt.Sprintf(" %12s %8s", "SYS", "NSYS")
	}
	if flt {
		head += fmt.Sprintf(" %12s %8s", "FLT", "NFLT")
	}
	fmt.Fprintf(w, " %10s %14s %10s %14s %14s %7s%s  %s\n", "CALLS", "BASE", "ERR", "CUM", "RAW", "%BASE", head, "NAME")
	for _, r := range a.Flat() {
		p := 0.0
		if total > 0 {
			p = 100 * float64(r.Base) / float64(total)
		}
		fmt.Fprintf(w, " %10d %14d %10.0f %14d %14d %7.2f%s  %s\n", r.Calls, r.Base, r.Err, r.Cum, r.Rough, p, extra(r), r.Name)
	}
	return w.Flush()
}

var frameCleaner = strings.NewReplacer(";", ":", "\n", " ", "\r", " ") // only what the folded format requires

func cleanFrame(s string) string { return frameCleaner.Replace(s) }

// walkPaths calls visit for n and every node below it, depth first in
// the order the calls were first made, with the path from the thread's
// first frame down to the node (empty for the root) and how much of that
// path's start is the previous call's (path[:same] is unchanged). The
// path is the walk's own: memory follows the tree's depth, not the sum
// of its paths' lengths.
func walkPaths(n *Node, visit func(n *Node, path []*Node, same int)) {
	var path []*Node
	same := 0
	var rec func(n *Node)
	rec = func(n *Node) {
		if n.Parent != nil {
			path = append(path, n)
		}
		visit(n, path, same)
		same = len(path)
		for _, c := range n.Children {
			rec(c)
		}
		if n.Parent != nil {
			path = path[:len(path)-1]
			same = min(same, len(path))
		}
	}
	rec(n)
}

// WriteFolded writes the folded stacks (flamegraph.pl input): one line
// "thread;f1;...;fn BASE" per call path with a BASE, threads in order,
// each thread's paths depth first. Each line is written frame by frame
// from the tree (a deep recursion's lines are long, but no line is
// built in memory). Its size is the sum of the paths' lengths, which a
// deep, branchy tree makes huge: WriteFoldedMax bounds it.
func (a *Analysis) WriteFolded(out io.Writer) error {
	w := bufio.NewWriterSize(out, 256<<10)
	clean := map[string]string{}
	var num []byte
	for _, t := range a.Trees {
		label := threadLabel(t)
		walkPaths(t.Root, func(n *Node, path []*Node, _ int) {
			if n.Base == 0 {
				return
			}
			w.WriteString(label)
			for _, p := range path {
				c, ok := clean[p.Name]
				if !ok {
					c = cleanFrame(p.Name)
					clean[p.Name] = c
				}
				w.WriteByte(';')
				w.WriteString(c)
			}
			num = strconv.AppendUint(append(num[:0], ' '), n.Base, 10)
			w.Write(append(num, '\n'))
		})
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("writing the folded stacks: %w", err)
	}
	return nil
}

// WritePprof writes the trees as a gzipped pprof profile: samples "calls"
// and the calibrated metric, one sample per call path, labelled with the
// thread (streamed: see pprofloc.Stream). A function in a readable file is
// at its first instruction, as the file gives it, in a mapping of the
// file's load segment with its build id and the instruction's source
// line; others (hookit_name's ids, anonymous code) at their name alone.
func (a *Analysis) WritePprof(out io.Writer) error {
	metric := pprofloc.ValueType{Type: a.Info.Metric, Unit: a.unit()}
	s := pprofloc.NewStream(out, []pprofloc.ValueType{{Type: "calls", Unit: "count"}, metric}, metric, 1)
	var locs []uint64
	var nm *Namer
	if a.Proc != nil {
		nm = ProcessNamer(a.Proc)
	}
	type fnKey struct {
		name string
		fn   uint64
	}
	byFn := map[fnKey]uint64{}
	loc := func(p *Node) uint64 {
		if nm == nil || p.api {
			return s.Loc(p.Name, p.Name, "", 0)
		}
		k := fnKey{p.Name, p.Fn}
		if id, ok := byFn[k]; ok {
			return id
		}
		id := uint64(0)
		if e, ok := nm.Entry(p.Fn); ok {
			// the function's first instruction, in its file's mapping
			m := s.Mapping(e.File, e.BuildID, e.Start, e.Limit, e.Offset)
			id = s.AddrLoc(m, e.Addr, s.Func(p.Name+"\x00"+e.Source, p.Name, e.Source, int64(e.Line)), int64(e.Line))
		} else {
			id = s.Loc(p.Name, p.Name, "", 0)
		}
		byFn[k] = id
		return id
	}
	for _, t := range a.Trees {
		label := pprofloc.Label{Key: "thread", Str: threadLabel(t)}
		walkPaths(t.Root, func(n *Node, path []*Node, same int) {
			locs = locs[:min(same, len(locs))]
			for _, p := range path[len(locs):] {
				locs = append(locs, loc(p))
			}
			if n.Parent == nil {
				if n.Base == 0 {
					return
				}
				s.Sample([]uint64{s.Loc("(outside)", "(outside)", "", 0)}, []int64{int64(n.Calls), int64(n.Base)}, label)
				return
			}
			s.Sample(locs, []int64{int64(n.Calls), int64(n.Base)}, label)
		})
		locs = locs[:0]
	}
	return s.Close()
}

// WriteChrome writes the entry/exit events as a Chrome/Perfetto trace
// (JSON trace-event format: B and E events, streamed from the thread
// files). ts is the wall clock, CLOCK_MONOTONIC in µs, common to every
// thread and process of the run: each event's time is that of the last
// wall-clock anchor before it (libhookit writes one at a thread's first
// event, at each buffer, and after the thread was scheduled out and in)
// plus the metric since, in ns (Info.NsPerUnit; a metric that is no time
// counts one ns per unit), never before the previous event. Each E event
// carries the call's raw inclusive metric as its argument. Processes and
// threads are named (M events). Calls the stack repair closed are ended
// at the next event; calls still open at the end are ended at the last one.
func (a *Analysis) WriteChrome(out io.Writer) error {
	c := &chromeWriter{w: bufio.NewWriterSize(out, 256<<10), nm: ProcessNamer(a.Proc), names: map[uint64][]byte{},
		metric: strconv.Quote(a.Info.Metric), scale: a.Info.NsPerUnit, first: true}
	if c.scale <= 0 {
		c.scale = 1
	}
	c.w.WriteString("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n")
	p := a.Proc
	c.meta("process_name", p.Info.PID, p.Info.PID, processName(p))
	for _, t := range p.Threads {
		name := p.ThreadNames[t.TID]
		if name == "" {
			name = fmt.Sprintf("tid %d", t.TID)
		}
		c.meta("thread_name", p.Info.PID, t.TID, name)
	}
	for _, t := range p.Threads {
		if err := c.thread(t); err != nil {
			return fmt.Errorf("writing the trace: %w", err)
		}
	}
	c.w.WriteString("\n]}\n")
	if err := c.w.Flush(); err != nil {
		return fmt.Errorf("writing the trace: %w", err)
	}
	return nil
}

func processName(p *Process) string {
	if p.Info.Exe != "" {
		return filepath.Base(p.Info.Exe)
	}
	return fmt.Sprintf("pid %d", p.Info.PID)
}

// chromeWriter writes trace events by hand (no reflection per event).
type chromeWriter struct {
	w      *bufio.Writer
	nm     *Namer
	names  map[uint64][]byte // function id -> its name, quoted
	metric string            // the argument's key, quoted
	scale  float64
	first  bool
	num    []byte
	// the thread being written
	pid, tid        int
	anchor, anchorM uint64 // the last wall-clock anchor (ns) and the metric there
	anchored        bool
	lastTs          float64
	stack           []chromeFrame
}

type chromeFrame struct {
	fn    uint64
	start uint64 // the metric when the call began (its entry's late read)
}

func (c *chromeWriter) sep() {
	if !c.first {
		c.w.WriteString(",\n")
	}
	c.first = false
}

func (c *chromeWriter) meta(what string, pid, tid int, name string) {
	c.sep()
	fmt.Fprintf(c.w, "{\"name\":%q,\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":%s}}", what, pid, tid, jsonString(name))
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func (c *chromeWriter) name(fn uint64) []byte {
	n, ok := c.names[fn]
	if !ok {
		n = []byte(jsonString(c.nm.Name(fn)))
		c.names[fn] = n
	}
	return n
}

// ts is the wall-clock time of metric value m in µs.
func (c *chromeWriter) ts(m uint64) float64 {
	var ns float64
	if m >= c.anchorM {
		ns = float64(c.anchor) + float64(m-c.anchorM)*c.scale
	} else {
		ns = float64(c.anchor) - float64(c.anchorM-m)*c.scale
	}
	t := ns / 1000
	if t < c.lastTs {
		t = c.lastTs
	}
	c.lastTs = t
	return t
}

func (c *chromeWriter) event(ph byte, fn uint64, ts float64, incl uint64, withArg bool) {
	c.sep()
	b := append(c.num[:0], `{"name":`...)
	b = append(b, c.name(fn)...)
	b = append(b, `,"ph":"`...)
	b = append(b, ph)
	b = append(b, `","ts":`...)
	b = strconv.AppendFloat(b, ts, 'f', 3, 64)
	b = append(b, `,"pid":`...)
	b = strconv.AppendInt(b, int64(c.pid), 10)
	b = append(b, `,"tid":`...)
	b = strconv.AppendInt(b, int64(c.tid), 10)
	if withArg {
		b = append(b, `,"args":{`...)
		b = append(b, c.metric...)
		b = append(b, ':')
		b = strconv.AppendUint(b, incl, 10)
		b = append(b, '}')
	}
	b = append(b, '}')
	c.num = b
	c.w.Write(b)
}

// end closes the frames above depth i at metric m.
func (c *chromeWriter) end(i int, m uint64) {
	ts := c.ts(m)
	for len(c.stack) > i {
		f := c.stack[len(c.stack)-1]
		incl := uint64(0)
		if m > f.start {
			incl = m - f.start
		}
		c.event('E', f.fn, ts, incl, true)
		c.stack = c.stack[:len(c.stack)-1]
	}
}

func (c *chromeWriter) thread(t *Thread) error {
	c.pid, c.tid = t.PID, t.TID
	c.anchor, c.anchorM, c.anchored, c.lastTs = 0, 0, false, 0
	c.stack = c.stack[:0]
	var last uint64
	err := t.Each(func(e *Event) {
		if e.Wall != 0 || !c.anchored {
			// (a file of the format before the anchors: the metric alone)
			c.anchor, c.anchorM, c.anchored = e.Wall, e.Early, true
		}
		last = e.Late
		switch e.Kind {
		case KindEnter:
			c.event('B', e.Fn, c.ts(e.Early), 0, false)
			c.stack = append(c.stack, chromeFrame{fn: e.Fn, start: e.Late})
		case KindExit, KindExcExit:
			i := len(c.stack) - 1
			for i >= 0 && c.stack[i].fn != e.Fn {
				i--
			}
			if i >= 0 {
				c.end(i, e.Early)
			}
		case KindMark:
			if e.Fn == MarkEnd || e.Fn == MarkStart {
				c.end(0, e.Early)
			}
		}
	})
	c.end(0, last)
	return err
}
