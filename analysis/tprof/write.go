package tprof

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"sort"
	"strconv"
	"time"

	"github.com/google/pprof/profile"

	"perfinsp/analysis/pprofloc"
	"perfinsp/format/nrm2"
)

// Warnings returns the lines every report starts with when the trace is
// incomplete: lost records, a buffer that filled, unreadable modules.
func (rep *Report) Warnings() []string {
	var w []string
	if rep.Lost > 0 || rep.MTELost > 0 {
		w = append(w, fmt.Sprintf("WARNING: records were lost during tracing: %d trace records and %d MTE records (see swtrace info); percentages cover what was recorded", rep.Lost, rep.MTELost))
	}
	if rep.File.Header.Flags&nrm2.FlagBufferFull != 0 {
		w = append(w, "WARNING: a buffer filled and tracing stopped early (normal mode): use a larger -t or cont mode")
	}
	if !rep.File.Complete {
		w = append(w, "WARNING: the trace file is incomplete (no end marker): it was cut short")
	}
	if rep.RecordErr != nil {
		w = append(w, "WARNING: the trace ends in a damaged record; the report covers what came before: "+rep.RecordErr.Error())
	}
	w = append(w, rep.File.Warnings()...) // damage the reader salvaged around
	for _, p := range rep.Problems {
		w = append(w, "WARNING: "+p) // each names its file and what follows
	}
	return w
}

func pct(n, total uint64) float64 {
	if total == 0 {
		return 0
	}
	return 100 * float64(n) / float64(total)
}

// WritePI writes tprof.out in PI's form.
func (rep *Report) WritePI(out io.Writer) error {
	w := bufio.NewWriter(out)
	h := rep.File.Header
	fmt.Fprintln(w, "perfinsp tprof report")
	fmt.Fprintln(w)
	for _, l := range rep.Warnings() {
		fmt.Fprintln(w, " "+l)
	}
	dur := time.Duration(0)
	if rep.Last > rep.First {
		dur = time.Duration(rep.Last - rep.First)
	}
	backend := "daemon"
	if h.Backend == nrm2.BackendKmod {
		backend = "kmod"
	}
	fmt.Fprintf(w, " Total Ticks   : %d\n", rep.Total)
	if rep.Filter != nil {
		fmt.Fprintf(w, " Selected      : %s (%d ticks of other processes and threads left out)\n", rep.Selected, rep.Filtered)
	}
	if rep.Event != "" {
		fmt.Fprintf(w, " Rate          : a sample every %d %s events (event-based)\n", rep.EventPeriod, rep.Event)
	} else {
		fmt.Fprintf(w, " Rate          : %d Hz (time-based)\n", h.RateHz)
	}
	fmt.Fprintf(w, " Duration      : %.3f s (first to last tick)\n", dur.Seconds())
	fmt.Fprintf(w, " CPUs          : %d\n", h.NCPUs)
	fmt.Fprintf(w, " Trace         : %s, %s mode, %s backend, kernel %s on %s, started %s\n", rep.File.Path, nrm2.ModeName(h.Mode), backend,
		h.KernelRelease, h.Hostname, time.Unix(0, int64(h.StartWallNs)).UTC().Format(time.RFC3339))
	fmt.Fprintln(w)
	// One cell order serves the three sections whose levels are prefixes
	// of process, module, symbol, thread. The sections are written on two
	// goroutines, about half the rows each (a many-process report is
	// 200 k rows), the second's into a buffer copied out after the first;
	// the labels and the names' ranks (labelAll) are made while the second
	// goroutine makes its own order, each order on the goroutine that
	// needs it first.
	pmst := []int{LPid, LMod, LSym, LTid}
	ptms := []int{LPid, LTid, LMod, LSym}
	ms := []int{LMod, LSym}
	section := func(w io.Writer, title string, levels []int, order []int32) {
		fmt.Fprintln(w, "================================================================")
		fmt.Fprintf(w, ")) %s\n", title)
		fmt.Fprintln(w, "================================================================")
		fmt.Fprintln(w)
		fmt.Fprintf(w, "%-4s %10s %7s  %s\n", "LAB", "TKS", "%%%", "NAMES")
		rb := &rowBuf{}
		rep.eachRow(levels, order, func(depth int, label string, ticks uint64, name string) {
			rb.b = appendRowParts(rb.b[:0], label, ticks, depth, rep.Total, -1, name)
			w.Write(rb.b)
		})
		fmt.Fprintln(w)
	}
	second := &paddedBuffer{}
	// the labels of processes and threads (and their ranks) made on this
	// goroutine, the names' ranks on the second: each table only read
	// once its channel is closed
	labeled, ranked := make(chan struct{}), make(chan struct{})
	var byPMST []int32
	pmstMade := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		var scratch [2][]sortKey
		byMS := rep.cellOrderWith(ms, &scratch)
		rep.rankNames()
		close(ranked)
		second.Grow(64 * len(rep.cells))
		section(second, "Module_Symbol", ms, byMS) // (names only)
		<-labeled
		<-pmstMade
		rep.writeWithinProcess(second, byPMST)
	}()
	rep.labelThreads()
	close(labeled)
	byPMST = rep.cellOrder(pmst)
	close(pmstMade)
	byPTMS := rep.cellOrder(ptms)
	<-ranked
	section(w, "Process", pmst[:1], byPMST)
	section(w, "Process_Module", pmst[:2], byPMST)
	section(w, "Process_Thread_Module_Symbol", ptms, byPTMS)
	<-done
	second.WriteTo(w)
	if len(rep.stk) > 0 {
		rep.writeCallTree(w)
	}
	return w.Flush()
}

// rowBuf is a writer goroutine's row being made (and the row's process's
// ticks), and paddedBuffer the second writer's output: each a line of the
// cache away from anything else. Two goroutines write rows at once, and
// their small variables, written at every row, could be neighbours on the
// heap (false sharing: see tickWorker).
type rowBuf struct {
	_    [cacheLine]byte
	b    []byte
	proc uint64
	_    [cacheLine]byte
}

type paddedBuffer struct {
	_ [cacheLine]byte
	bytes.Buffer
	_ [cacheLine]byte
}

// appendRowParts appends one section row as fmt's "%-4s %10d %7.2f  %s%s\n"
// would with pct(ticks, total) (and a second "%7.2f" column, pct(ticks,
// proc), when proc >= 0), without fmt.
func appendRowParts(b []byte, label string, ticks uint64, depth int, total uint64, proc int64, name string) []byte {
	var num [32]byte
	b = append(b, label...)
	for i := len(label); i < 4; i++ {
		b = append(b, ' ')
	}
	b = append(b, ' ')
	b = padLeft(b, strconv.AppendUint(num[:0], ticks, 10), 10)
	b = append(b, ' ')
	b = padLeft(b, appendPct(num[:0], ticks, total), 7)
	if proc >= 0 {
		b = append(b, ' ')
		b = padLeft(b, appendPct(num[:0], ticks, uint64(proc)), 7)
	}
	b = append(b, ' ', ' ')
	for i := 0; i < depth; i++ {
		b = append(b, ' ')
	}
	b = append(b, name...)
	return append(b, '\n')
}

// appendPct appends pct(n, total) as strconv's 'f' with 2 decimals would,
// in integers (strconv's float formatting was a tenth of writing a
// many-process tprof.out). n*10000/total rounded to the nearest is what
// the float64 rounds to: the float is within 2^-53 of the quotient, which
// is at least 1/(200 total) from a rounding boundary unless on it, far
// more while total < 2^38; an exact tie (where the float's binary value
// decides) and larger totals go to strconv.
func appendPct(b []byte, n, total uint64) []byte {
	if total != 0 && n <= total && total < 1<<38 {
		if q, r := n*10000/total, n*10000%total; 2*r != total {
			if 2*r > total {
				q++
			}
			b = strconv.AppendUint(b, q/100, 10)
			return append(b, '.', byte('0'+q%100/10), byte('0'+q%10))
		}
	}
	return strconv.AppendFloat(b, pct(n, total), 'f', 2, 64)
}

func padLeft(b, v []byte, width int) []byte {
	for i := len(v); i < width; i++ {
		b = append(b, ' ')
	}
	return append(b, v...)
}

// writeWithinProcess writes tprof.out's Process_Module_Symbol_Within_Process
// section: PI's row form with a %PROC column after %%%, the share of the
// process's own ticks (what perf report of that process shows); %%% stays
// the share of all ticks (idle included).
func (rep *Report) writeWithinProcess(w io.Writer, byPMST []int32) {
	fmt.Fprintln(w, "================================================================")
	fmt.Fprintln(w, ")) Process_Module_Symbol_Within_Process")
	fmt.Fprintln(w, "================================================================")
	fmt.Fprintln(w)
	fmt.Fprintln(w, " %%% is the share of all ticks, %PROC the share of the ticks of the row's process")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "%-4s %10s %7s %7s  %s\n", "LAB", "TKS", "%%%", "%PROC", "NAMES")
	rb := &rowBuf{}
	rep.eachRow([]int{LPid, LMod, LSym}, byPMST, func(depth int, label string, ticks uint64, name string) {
		if depth == 0 {
			rb.proc = ticks
		}
		rb.b = appendRowParts(rb.b[:0], label, ticks, depth, rep.Total, int64(rb.proc), name)
		w.Write(rb.b)
	})
	fmt.Fprintln(w)
}

// WriteFolded writes folded stacks, one line per stack with its tick count:
// flame-graph input. With call stacks in the trace (`swtrace enable
// callstack`) a line is process;root;...;leaf, one frame per function;
// without them the "stack" is process;module;symbol.
func (rep *Report) WriteFolded(out io.Writer) error {
	w := bufio.NewWriter(out)
	type kv struct {
		k string
		n uint64
	}
	m := rep.folded()
	rows := make([]kv, 0, len(m))
	for k, n := range m {
		rows = append(rows, kv{k, n})
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].n != rows[j].n {
			return rows[i].n > rows[j].n
		}
		return rows[i].k < rows[j].k
	})
	for _, r := range rows {
		fmt.Fprintf(w, "%s %d\n", r.k, r.n)
	}
	return w.Flush()
}

// Profile builds a pprof profile, each sample labelled with its process
// and thread. A report built with addresses (BuildWithAddresses) has a
// location per address, in a mapping of its module with its source line
// (profileByAddress); others one location per module and symbol.
func (rep *Report) Profile() *profile.Profile {
	if rep.addrs != nil {
		return rep.profileByAddress()
	}
	p, period := rep.newProfile()
	maps := map[string]*profile.Mapping{}
	modTicks := map[string]uint64{}
	funcs := map[[2]string]*profile.Function{}
	locs := map[[2]string]*profile.Location{}
	location := func(module, symbol string) *profile.Location {
		mk := [2]string{module, symbol}
		loc := locs[mk]
		if loc == nil {
			m := maps[module]
			if m == nil {
				m = &profile.Mapping{ID: uint64(len(p.Mapping) + 1), File: module, HasFunctions: true}
				maps[module] = m
				p.Mapping = append(p.Mapping, m)
			}
			fn := funcs[mk]
			if fn == nil {
				fn = &profile.Function{ID: uint64(len(p.Function) + 1), Name: symbol, SystemName: symbol, Filename: module}
				funcs[mk] = fn
				p.Function = append(p.Function, fn)
			}
			loc = &profile.Location{ID: uint64(len(p.Location) + 1), Mapping: m, Line: []profile.Line{{Function: fn}}}
			locs[mk] = loc
			p.Location = append(p.Location, loc)
		}
		return loc
	}
	if len(rep.stk) > 0 {
		// Real call stacks: each sample's locations leaf first, as pprof
		// wants; a location per resolved name (rep.res is one entry per
		// module and symbol), labels shared by the samples of a thread.
		locByRes := make([]*profile.Location, len(rep.res))
		type labKey struct {
			pid, tid  uint32
			truncated bool
		}
		type labs struct {
			lab map[string][]string
			num map[string][]int64
		}
		labels := map[labKey]labs{}
		for i := range rep.stk {
			e := &rep.stk[i]
			ls := make([]*profile.Location, 0, len(e.frames))
			for j := len(e.frames) - 1; j >= 0; j-- {
				idx := e.frames[j]
				loc := locByRes[idx]
				if loc == nil {
					loc = location(rep.res[idx].Module, rep.res[idx].Symbol)
					locByRes[idx] = loc
				}
				ls = append(ls, loc)
			}
			lk := labKey{e.pid, e.tid, e.truncated}
			l, ok := labels[lk]
			if !ok {
				l.lab = map[string][]string{"process": {rep.ProcTitle(e.pid)}, "thread": {rep.ThreadTitle(e.pid, e.tid)}}
				if e.truncated {
					l.lab["truncated"] = []string{"yes"}
				}
				l.num = map[string][]int64{"pid": {int64(e.pid)}, "tid": {int64(e.tid)}}
				labels[lk] = l
			}
			p.Sample = append(p.Sample, &profile.Sample{Location: ls, Value: []int64{int64(e.n), int64(e.n) * period},
				Label: l.lab, NumLabel: l.num})
			modTicks[rep.res[e.frames[len(e.frames)-1]].Module] += e.n
		}
		sortMappings(p, modTicks)
		return p
	}
	ticks := rep.TickCounts()
	keys := make([]Key, 0, len(ticks))
	for k := range ticks {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a.PID != b.PID {
			return a.PID < b.PID
		}
		if a.TID != b.TID {
			return a.TID < b.TID
		}
		if a.Module != b.Module {
			return a.Module < b.Module
		}
		return a.Symbol < b.Symbol
	})
	for _, k := range keys {
		n := ticks[k]
		loc := location(k.Module, k.Symbol)
		p.Sample = append(p.Sample, &profile.Sample{
			Location: []*profile.Location{loc},
			Value:    []int64{int64(n), int64(n) * period},
			Label:    map[string][]string{"process": {rep.ProcTitle(k.PID)}, "thread": {rep.ThreadTitle(k.PID, k.TID)}},
			NumLabel: map[string][]int64{"pid": {int64(k.PID)}, "tid": {int64(k.TID)}},
		})
		modTicks[k.Module] += n
	}
	sortMappings(p, modTicks)
	return p
}

// newProfile is an empty profile with the report's sample types, period,
// times and warnings, and the period.
func (rep *Report) newProfile() (*profile.Profile, int64) {
	h := rep.File.Header
	period := int64(1)
	vt := &profile.ValueType{Type: "cpu", Unit: "nanoseconds"}
	switch {
	case rep.Event != "":
		// Event-based tprof: a sample every EventPeriod events (the
		// header's rate is that period, not a frequency). The software
		// clocks count nanoseconds of CPU time; any other event counts
		// itself.
		period = int64(max(rep.EventPeriod, 1))
		if rep.Event != "cpu-clock" && rep.Event != "task-clock" {
			vt = &profile.ValueType{Type: rep.Event, Unit: "count"}
		}
	case h.RateHz > 0:
		period = int64(time.Second) / int64(h.RateHz)
	}
	return &profile.Profile{
		SampleType:    []*profile.ValueType{{Type: "samples", Unit: "count"}, vt},
		PeriodType:    vt,
		Period:        period,
		TimeNanos:     int64(h.StartWallNs),
		DurationNanos: int64(rep.Last - rep.First),
		Comments:      rep.Warnings(),
	}, period
}

// sortMappings puts the module with the most ticks first: pprof takes the
// first mapping as the main binary (its "File:" line).
func sortMappings(p *profile.Profile, modTicks map[string]uint64) {
	sort.SliceStable(p.Mapping, func(i, j int) bool {
		return modTicks[p.Mapping[i].File] > modTicks[p.Mapping[j].File]
	})
	for i, m := range p.Mapping {
		m.ID = uint64(i + 1)
	}
}

// WritePprof writes the gzipped profile.proto.
func (rep *Report) WritePprof(out io.Writer) error {
	p := rep.Profile()
	if err := p.CheckValid(); err != nil {
		return fmt.Errorf("pprof profile: %w", err)
	}
	return pprofloc.Write(p, out)
}
