// Package tprof builds tprof reports from a trace: ticks per process,
// thread, module and symbol, resolved with A2N as of each tick's time. It
// writes PI's tprof.out form and the modern forms (pprof profile.proto,
// folded stacks for flame graphs).
package tprof

import (
	"fmt"
	"sort"

	"perfinsp/libperfutil/a2n"
	"perfinsp/libperfutil/nrm2"
	"perfinsp/libperfutil/trace"
)

// Key is one aggregation cell.
type Key struct {
	PID, TID uint32
	Module   string
	Symbol   string
}

// Report is the aggregated ticks of a trace.
type Report struct {
	File  *nrm2.File
	Ticks map[Key]uint64
	// cells are the same counts with module and symbol interned, for
	// building sections without hashing strings.
	cells     []cell
	names     []string // interned module and symbol names
	Total     uint64
	ProcName  map[uint32]string
	ThreadNm  map[[2]uint32]string
	First     uint64 // time of the first and last tick
	Last      uint64
	Lost      uint64 // trace records lost
	MTELost   uint64
	Problems  []string // modules that could not be read
	RecordErr error    // a decode error that ended the trace early
}

// Build reads every record of f in time order, keeping A2N's process table
// up to date, and counts tprof ticks. A decode error part-way through keeps
// what was read and is reported in RecordErr.
func Build(f *nrm2.File, r *a2n.Resolver, onRecord func(rec *trace.Record, res *a2n.Result)) *Report {
	rep := &Report{File: f, Ticks: map[Key]uint64{}, ProcName: map[uint32]string{}, ThreadNm: map[[2]uint32]string{}}
	rep.Lost, rep.MTELost = f.Lost()
	if r.KernelRelease == "" {
		r.KernelRelease = f.Header.KernelRelease // names [vdso] when this is that kernel
	}
	// Each (thread, address) gets one counter the first time it is seen,
	// found again with one map lookup; the tables are per process and
	// dropped when its mappings change (counters are kept in all).
	type entry struct {
		pid, tid uint32
		res      int32
		off      uint64
		n        uint64
	}
	type tiKey struct {
		tid    uint32
		kernel bool
		ip     uint64
	}
	var results []a2n.Result
	intern := map[[2]string]int32{}
	var all []*entry
	cache := map[uint32]map[tiKey]*entry{}
	lastPid, lastCache := uint32(1<<32-1), map[tiKey]*entry(nil)
	err := f.Records(func(rec *trace.Record) error {
		switch rec.Major {
		case trace.MajorMTE, trace.MajorJITLoad:
			r.Apply(rec)
			if rec.Major == trace.MajorJITLoad || rec.Minor == trace.MTEExec || rec.Minor == trace.MTESegment || rec.Minor == trace.MTEUnmap || rec.Minor == trace.MTEFork {
				pid := uint32(rec.Field(0))
				if rec.Major == trace.MajorMTE && rec.Minor == trace.MTEFork {
					pid = uint32(rec.Field(2))
				}
				delete(cache, pid)
				if pid == lastPid {
					lastPid, lastCache = 1<<32-1, nil
				}
			}
			if onRecord != nil {
				onRecord(rec, nil)
			}
		case trace.MajorTprof:
			pid, tid, ip := uint32(rec.Field(0)), uint32(rec.Field(1)), rec.Field(2)
			kernel := rec.Field(3)&trace.TprofKernel != 0
			pc := lastCache
			if pid != lastPid {
				pc = cache[pid]
				if pc == nil {
					pc = map[tiKey]*entry{}
					cache[pid] = pc
				}
				lastPid, lastCache = pid, pc
			}
			k := tiKey{tid, kernel, ip}
			e := pc[k]
			if e == nil {
				res := r.Resolve(pid, ip, kernel)
				rk := [2]string{res.Module, res.Symbol}
				idx, known := intern[rk]
				if !known {
					idx = int32(len(results))
					intern[rk] = idx
					results = append(results, res)
				}
				e = &entry{pid: pid, tid: tid, res: idx, off: res.Offset}
				pc[k] = e
				all = append(all, e)
				if _, ok := rep.ThreadNm[[2]uint32{pid, tid}]; !ok {
					rep.ThreadNm[[2]uint32{pid, tid}] = r.ThreadName(pid, tid)
					rep.ProcName[pid] = r.ProcessName(pid)
				}
			}
			e.n++
			if onRecord != nil {
				res := results[e.res]
				res.Offset = e.off
				onRecord(rec, &res)
			}
			rep.Total++
			if rep.First == 0 || rec.Time < rep.First {
				rep.First = rec.Time
			}
			if rec.Time > rep.Last {
				rep.Last = rec.Time
			}
		default:
			if onRecord != nil {
				onRecord(rec, nil)
			}
		}
		return nil
	})
	nameID := map[string]int32{}
	id := func(n string) int32 {
		i, ok := nameID[n]
		if !ok {
			i = int32(len(rep.names))
			nameID[n] = i
			rep.names = append(rep.names, n)
		}
		return i
	}
	resMod := make([]int32, len(results))
	resSym := make([]int32, len(results))
	for i, res := range results {
		resMod[i], resSym[i] = id(res.Module), id(res.Symbol)
	}
	merged := map[cell]uint64{}
	for _, e := range all {
		res := results[e.res]
		rep.Ticks[Key{e.pid, e.tid, res.Module, res.Symbol}] += e.n
		merged[cell{pid: e.pid, tid: e.tid, mod: resMod[e.res], sym: resSym[e.res]}] += e.n
	}
	rep.cells = make([]cell, 0, len(merged))
	for c, n := range merged {
		c.n = n
		rep.cells = append(rep.cells, c)
	}
	rep.RecordErr = err
	// Names known by the end of the trace are the best ones (exec renames).
	for pid := range rep.ProcName {
		rep.ProcName[pid] = r.ProcessName(pid)
	}
	for k := range rep.ThreadNm {
		if n := r.ThreadName(k[0], k[1]); n != "" {
			rep.ThreadNm[k] = n
		}
	}
	rep.Problems = r.Cache.Problems()
	return rep
}

// Row is one line of a report section.
type Row struct {
	Label string // PID, TID, MOD, SYM
	Ticks uint64
	Name  string
	Sub   []*Row
}

type cell struct {
	pid, tid uint32
	mod, sym int32
	n        uint64
}

type aggKey struct {
	level int
	id    uint32
}

type agg struct {
	ticks uint64
	sub   map[aggKey]*agg
	label string
	name  string
}

func (a *agg) child(label string, key aggKey, name func() string) *agg {
	if a.sub == nil {
		a.sub = map[aggKey]*agg{}
	}
	c := a.sub[key]
	if c == nil {
		c = &agg{label: label, name: name()}
		a.sub[key] = c
	}
	return c
}

func (a *agg) rows() []*Row {
	out := make([]*Row, 0, len(a.sub))
	for _, c := range a.sub {
		out = append(out, &Row{Label: c.label, Ticks: c.ticks, Name: c.name, Sub: c.rows()})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Ticks != out[j].Ticks {
			return out[i].Ticks > out[j].Ticks
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// ProcLabel is PI's process name form: name_pid (pid in hex).
func (rep *Report) ProcLabel(pid uint32) string {
	return fmt.Sprintf("%s_%x", rep.ProcName[pid], pid)
}

// ThreadLabel is PI's thread name form: name_tid (tid in hex). A thread
// no record named carries its process's name, as a new thread starts with
// its creator's comm.
func (rep *Report) ThreadLabel(pid, tid uint32) string {
	n := rep.ThreadNm[[2]uint32{pid, tid}]
	if n == "" {
		n = rep.ProcName[pid]
	}
	if n == "" {
		n = "tid"
	}
	return fmt.Sprintf("%s_%x", n, tid)
}

// Levels of a section.
const (
	LPid = iota
	LTid
	LMod
	LSym
)

// Section aggregates ticks along the given levels, e.g. {LPid, LMod}.
func (rep *Report) Section(levels ...int) []*Row {
	root := &agg{}
	for _, c := range rep.cells {
		a := root
		for _, l := range levels {
			switch l {
			case LPid:
				a = a.child("PID", aggKey{l, c.pid}, func() string { return rep.ProcLabel(c.pid) })
			case LTid:
				a = a.child("TID", aggKey{l, c.tid}, func() string { return rep.ThreadLabel(c.pid, c.tid) })
			case LMod:
				a = a.child("MOD", aggKey{l, uint32(c.mod)}, func() string { return rep.names[c.mod] })
			case LSym:
				a = a.child("SYM", aggKey{l, uint32(c.sym)}, func() string { return rep.names[c.sym] })
			}
			a.ticks += c.n
		}
	}
	return root.rows()
}
