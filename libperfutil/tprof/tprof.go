// Package tprof builds tprof reports from a trace: ticks per process,
// thread, module and symbol, resolved with A2N as of each tick's time. It
// writes PI's tprof.out form and the modern forms (pprof profile.proto,
// folded stacks for flame graphs).
package tprof

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"

	"perfinsp/libperfutil/a2n"
	"perfinsp/libperfutil/nrm2"
	"perfinsp/libperfutil/trace"
)

// entryMax is the most ticks one count entry holds (tests lower it).
var entryMax uint64 = math.MaxUint32

// Key is one aggregation cell.
type Key struct {
	PID, TID uint32
	Module   string
	Symbol   string
}

// Report is the aggregated ticks of a trace.
type Report struct {
	File *nrm2.File
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
	// Filter is the selection the report covers (nil: every tick);
	// Filtered counts the ticks it left out.
	Filter   *Filter
	Filtered uint64
	Selected string // what the filter selected, as given
	// Event and EventPeriod: event-based tprof (TPROF_EVENT_NAME record).
	Event           string
	EventPeriod     uint64
	StackTicks      uint64 // ticks with a call stack (none: the trace has no stacks)
	TruncatedStacks uint64 // of them, cut at the depth limit
	// stk are the call stacks of the ticks (UNWIND records, `swtrace
	// enable callstack`), aggregated, most ticks first, with frames as
	// indexes into res, the resolved names (Stacks gives them with names).
	stk []stackEntry
	res []a2n.Result
	// the PID and TID row names, each made once
	procLabels   map[uint32]string
	threadLabels map[[2]uint32]string
	threads      []cell // a cell of each thread of cells, its pid and tid (labelAll)
	// the ranks of the row names (labelAll)
	nameRank   []uint32
	procRank   map[uint32]uint32
	threadRank map[[2]uint32]uint32
	parallel   bool         // the CPUs' ticks were counted at once (parallel.go)
	orderKeys  [2][]sortKey // cellOrder's arrays
}

// Stacks returns the call stacks of the ticks (UNWIND records, `swtrace
// enable callstack`), aggregated per thread, most ticks first; none when
// the trace has none. The writers do not need it (it is built on each
// call: a million-tick trace holds millions of frames).
func (rep *Report) Stacks() []*Stack {
	nf := 0
	for i := range rep.stk {
		nf += len(rep.stk[i].frames)
	}
	frames := make([]Frame, 0, nf) // one backing array for every stack's frames
	structs := make([]Stack, len(rep.stk))
	out := make([]*Stack, len(rep.stk))
	for i := range rep.stk {
		e := &rep.stk[i]
		start := len(frames)
		for j, idx := range e.frames {
			res := &rep.res[idx]
			frames = append(frames, Frame{Module: res.Module, Symbol: res.Symbol, Kernel: j >= len(e.frames)-e.kernel})
		}
		structs[i] = Stack{PID: e.pid, TID: e.tid, N: e.n, Truncated: e.truncated, Frames: frames[start:len(frames):len(frames)]}
		out[i] = &structs[i]
	}
	return out
}

// stackRec is a stackEntry while the trace is read: its frames are nf
// int32s at off in frame block block (no pointer for the collector).
type stackRec struct {
	pid, tid   uint32
	block, off int32
	nf, kernel uint16
	truncated  bool
	n          uint64
}

// stackEntry is one distinct stack of one thread: frames are indexes into
// Report.res, root first; the last kernel of them are kernel frames.
type stackEntry struct {
	pid, tid  uint32
	frames    []int32
	kernel    int
	truncated bool
	n         uint64
}

// Frame is one resolved frame of a call stack.
type Frame struct {
	Module, Symbol string
	Kernel         bool
}

// Stack is one distinct call stack of one thread, root first, and how many
// ticks had it.
type Stack struct {
	PID, TID  uint32
	Frames    []Frame // root first, the interrupted function last
	N         uint64
	Truncated bool // cut at the depth limit: the root frames are missing
}

// Filter selects the ticks a report covers: processes (and, with Children,
// the processes they create during the trace, by the MTE_FORK records),
// threads, or process names. Empty sets select everything.
type Filter struct {
	Pids     map[uint32]bool
	Children bool
	Tids     map[uint32]bool
	Comms    map[string]bool
}

// Describe says what the filter selects, for report headers.
func (f *Filter) Describe() string {
	var parts []string
	list := func(m map[uint32]bool) string {
		var ids []int
		for id := range m {
			ids = append(ids, int(id))
		}
		sort.Ints(ids)
		var ss []string
		for _, id := range ids {
			ss = append(ss, fmt.Sprint(id))
		}
		return strings.Join(ss, ",")
	}
	if len(f.Pids) > 0 {
		p := "pid " + list(f.Pids)
		if f.Children {
			p += " and the processes they created"
		}
		parts = append(parts, p)
	}
	if len(f.Tids) > 0 {
		parts = append(parts, "tid "+list(f.Tids))
	}
	if len(f.Comms) > 0 {
		var cs []string
		for c := range f.Comms {
			cs = append(cs, c)
		}
		sort.Strings(cs)
		parts = append(parts, "process name "+strings.Join(cs, ","))
	}
	return strings.Join(parts, "; ")
}

func (f *Filter) match(pid, tid uint32, comm func() string) bool {
	if len(f.Pids) > 0 && !f.Pids[pid] {
		return false
	}
	if len(f.Tids) > 0 && !f.Tids[tid] {
		return false
	}
	if len(f.Comms) > 0 && !f.Comms[comm()] {
		return false
	}
	return true
}

// Build reads every record of f in time order, keeping A2N's process table
// up to date, and counts tprof ticks. A decode error part-way through keeps
// what was read and is reported in RecordErr.
func Build(f *nrm2.File, r *a2n.Resolver, onRecord func(rec *trace.Record, res *a2n.Result)) *Report {
	return BuildFiltered(f, r, nil, onRecord)
}

// poolTables bounds the emptied tables a tablePool keeps for reuse, and
// poolTableMax the entries of a table it keeps (a larger one is dropped:
// emptying costs its size, and it would hold its memory).
const (
	poolTables   = 64
	poolTableMax = 1 << 14
)

// tablePool keeps emptied tables for reuse.
type tablePool[K comparable] []map[K]int32

// get returns an empty table.
func (p *tablePool[K]) get() map[K]int32 {
	if n := len(*p); n > 0 {
		m := (*p)[n-1]
		*p = (*p)[:n-1]
		return m
	}
	return map[K]int32{}
}

// put empties m (if not nil) and keeps it, unless the pool is full or m
// too large.
func (p *tablePool[K]) put(m map[K]int32) {
	if m != nil && len(*p) < poolTables && len(m) <= poolTableMax {
		clear(m)
		*p = append(*p, m)
	}
}

// BuildFiltered is Build for the ticks filt selects (nil: all); the others
// are counted in Filtered (and still passed to onRecord, unresolved).
func BuildFiltered(f *nrm2.File, r *a2n.Resolver, filt *Filter, onRecord func(rec *trace.Record, res *a2n.Result)) *Report {
	rep := &Report{File: f, ProcName: map[uint32]string{}, ThreadNm: map[[2]uint32]string{}, Filter: filt}
	if filt != nil {
		rep.Selected = filt.Describe()
	}
	if filt != nil && filt.Children && len(filt.Pids) > 0 {
		// The filter grows with the trace: copy it.
		pids := make(map[uint32]bool, len(filt.Pids))
		for p := range filt.Pids {
			pids[p] = true
		}
		cp := *filt
		cp.Pids = pids
		filt = &cp
		rep.Filter = filt
	}
	rep.Lost, rep.MTELost = f.Lost()
	if r.KernelRelease == "" {
		r.KernelRelease = f.Header.KernelRelease // names [vdso] when this is that kernel
	}
	// Each (thread, address) gets one counter the first time it is seen,
	// found again with one map lookup. A process's counters are keyed by
	// its slot, a number given anew each time its mappings change (the
	// next tick at an address is located again; the older counters are
	// kept), so that a key is two words. A counter is an entry (the
	// offsets naming at once needs are kept apart, in offs).
	type tickKey struct {
		ip uint64
		w  uint64 // kernel<<63 | slot<<32 | tid
	}
	// A result is one (module, symbol) name, each name interned as it
	// comes (names: one number a name, the report's), a result by its
	// two numbers (resMod, resSym): the cells need them, and interning
	// them after the naming would be a pause on the critical path of a
	// many-process report.
	var results []a2n.Result
	var names []string
	var resMod, resSym []int32
	nameNum := map[string]int32{}
	intern := map[uint64]int32{}
	nameOf := func(n string) int32 {
		i, ok := nameNum[n]
		if !ok {
			i = int32(len(names))
			nameNum[n] = i
			names = append(names, n)
		}
		return i
	}
	internRes := func(res a2n.Result) int32 {
		m, s := nameOf(res.Module), nameOf(res.Symbol)
		k := uint64(uint32(m))<<32 | uint64(uint32(s))
		idx, known := intern[k]
		if !known {
			idx = int32(len(results))
			intern[k] = idx
			results = append(results, res)
			resMod, resSym = append(resMod, m), append(resSym, s)
		}
		return idx
	}
	// Without onRecord (which needs each name at once), naming is
	// deferred: an address gets a Loc (the mapping it was in at its time),
	// the modules the Locs need load in the background (a2n Prefetch)
	// while the trace is read, and the Locs are named beside the reading
	// (below); counters and stacks hold Loc indexes until the end.
	deferred := onRecord == nil
	// Locs are kept in blocks (no copying as they grow); a module's Loc
	// is found by module number and file offset, a final name by itself.
	const locBlock = 4096
	var locs [][]a2n.Loc
	nlocs := int32(0)
	// the distinct Locs; a module met first starts loading
	locSet := &locSet{newMod: func(m string) {
		if m != "[vdso]" {
			r.Cache.Prefetch(m)
		}
	}}
	// Naming runs beside the reading: a block of Locs is named (on one
	// goroutine, in the order met) once it is full, the last one when the
	// reading ends. Naming uses the module cache and the Locs alone, not
	// the processes' mappings the reading changes.
	var toName chan []a2n.Loc
	var locRes []int32 // each Loc's name, an index into results
	namedAll := make(chan struct{})
	if deferred {
		toName = make(chan []a2n.Loc, 1024)
		go func() {
			defer close(namedAll)
			// The Locs of a module that one symbol names are named once,
			// found by the symbol's start, the last module's table at hand
			// (Finish demangles and copies the name each time, and
			// interning its result hashed two strings: three quarters of
			// the naming of a many-process trace's 47 k Locs).
			bySym := map[string]map[uint64]int32{}
			var path string
			var mod *a2n.Module
			var syms map[uint64]int32
			// (the names kept in a variable of this goroutine, given at the
			// end: a shared variable written at each Loc may share a line
			// of the cache with what the replay writes)
			var named []int32
			defer func() { locRes = named }()
			for b := range toName {
				for i := range b {
					l := &b[i]
					if p := l.Module(); p != "" {
						if mod == nil || p != path {
							path, mod = p, r.LocModule(*l)
							if syms = bySym[p]; syms == nil {
								syms = map[uint64]int32{}
								bySym[p] = syms
							}
						}
						if start, ok := mod.SymbolStart(l.FileOffset()); ok && mod.Err == nil {
							idx, known := syms[start]
							if !known {
								idx = internRes(r.Finish(*l))
								syms[start] = idx
							}
							named = append(named, idx)
							continue
						}
					}
					named = append(named, internRes(r.Finish(*l)))
				}
			}
		}()
	}
	addLoc := func(l a2n.Loc) int32 {
		if nlocs%locBlock == 0 {
			if len(locs) > 0 {
				toName <- locs[len(locs)-1] // full: it does not change again
			}
			locs = append(locs, make([]a2n.Loc, 0, locBlock))
		}
		locs[len(locs)-1] = append(locs[len(locs)-1], l)
		nlocs++
		return nlocs - 1
	}
	// resolve returns the index of addr's name (deferred: of its Loc) and
	// its offset from the symbol (only known, and only needed, at once).
	resolve := func(pid uint32, addr uint64, kernel bool) (int32, uint64) {
		if !deferred {
			res := r.Resolve(pid, addr, kernel)
			return internRes(res), res.Offset
		}
		return locSet.index(r.Locate(pid, addr, kernel), addLoc), 0
	}
	// prefetch starts loading the module of a user address early (the
	// counting locates addresses only when a process's state ends).
	prefetch := func(pid uint32, addr uint64, kernel bool) {
		if kernel {
			return
		}
		l := r.Locate(pid, addr, false)
		if m := l.Module(); m != "" {
			locSet.module(m)
		}
	}
	// Counters are kept in blocks (entryBlock).
	var all [][]entry
	var offs [][]uint64 // naming at once: each entry's offset from its symbol
	nent := int32(0)
	// newEntry adds an entry of no ticks and returns it.
	newEntry := func(pid, tid uint32, res int32, off uint64) int32 {
		if nent%entryBlock == 0 {
			all = append(all, make([]entry, 0, entryBlock))
			if !deferred {
				offs = append(offs, make([]uint64, 0, entryBlock))
			}
		}
		all[len(all)-1] = append(all[len(all)-1], entry{pid: pid, tid: tid, res: res})
		if !deferred {
			offs[len(offs)-1] = append(offs[len(offs)-1], off)
		}
		nent++
		return nent - 1
	}
	// addEntry adds n ticks of (pid, tid) at res.
	addEntry := func(pid, tid uint32, res int32, n uint64) {
		for n > 0 {
			m := min(n, entryMax)
			i := newEntry(pid, tid, res, 0)
			all[i/entryBlock][i%entryBlock].n = uint32(m)
			n -= m
		}
	}
	// Sized for a share of the ticks the file can hold (a tick is a
	// 32-byte record; real traces have a distinct (thread, address) per
	// five ticks or so): a map that grows from empty moves each entry
	// several times, which cost more than a flat report's lookups.
	var traceBytes int
	for _, c := range f.Chunks {
		if c.Kind == nrm2.ChunkTrace {
			traceBytes += len(c.Data)
		}
	}
	var tickIdx map[tickKey]int32
	if !deferred {
		tickIdx = make(map[tickKey]int32, min(traceBytes/32/8, 1<<18))
	}
	pidSlot := map[uint32]uint64{}
	slots := uint64(0)
	slotOf := func(pid uint32) uint64 {
		s, ok := pidSlot[pid]
		if !ok {
			slots++
			s = slots & (1<<31 - 1) // wraps only past two billion mapping changes
			pidSlot[pid] = s
		}
		return s
	}
	// In deferred naming an address's Loc depends only on its process's
	// mappings (its slot) and, for kernel addresses, not even on that:
	// threads of one process share it, every process shares the kernel's.
	// One table per slot (kernel: key 1<<63), keyed by the address alone
	// (Go's fast path for one-word keys; the two-word key hashed the
	// whole struct: 14 % of a flat report's CPU); a slot's table is
	// dropped when its process's mappings change (every tick of the old
	// state has been counted by then).
	locOf := map[uint64]map[uint64]int32{}
	// The tables of a process's state (its Locs, PCs and raw stacks) are
	// dropped when the state ends, and a many-process trace ends
	// thousands: they are emptied and used again (grown from empty, new
	// tables were a third of a many-process stacks report's CPU).
	var pcPool tablePool[uint64]
	var rawPool tablePool[string]
	lastLocKey, lastLocs := uint64(0), map[uint64]int32(nil)
	locTable := func(key uint64) map[uint64]int32 {
		if key == lastLocKey && lastLocs != nil {
			return lastLocs
		}
		t := locOf[key]
		if t == nil {
			t = pcPool.get()
			locOf[key] = t
		}
		lastLocKey, lastLocs = key, t
		return t
	}
	// Stacks: each PC resolved once per process (as ticks are), frames as
	// indexes into results, identical stacks counted together. A stack
	// seen before in a process (the same thread, flags and PCs: the
	// record's bytes) finds its entry with one lookup of those bytes;
	// those tables are dropped with the PC caches when mappings change.
	// A PC is cached as a kernel or a user frame ([1] or [0]): the name
	// of an address must not depend on which it was first met as.
	pcCache := map[uint32]*[2]map[uint64]int32{}
	stacks := map[string]int32{} // resolved key -> index into the stacks
	// The distinct stacks while the trace is read: 24 bytes each without
	// pointers, in blocks (a system-wide trace has a million; one slice
	// of 56-byte entries with a frames slice each, grown by appends, was
	// copied several times into fresh memory and scanned by the
	// collector: 15 % of a many-process stacks report). Their frames
	// share blocks of 64 k (a stack's frames in one block).
	const stkBlock = 4096
	var stkBlocks [][]stackRec
	nstk := int32(0)
	stkAt := func(i int32) *stackRec { return &stkBlocks[i/stkBlock][i%stkBlock] }
	var framePool [][]int32
	keepFrames := func(src []int32) (block, off int32) {
		nb := len(framePool)
		if nb == 0 || cap(framePool[nb-1])-len(framePool[nb-1]) < len(src) {
			framePool = append(framePool, make([]int32, 0, max(1<<16, len(src))))
			nb++
		}
		b := framePool[nb-1]
		off = int32(len(b))
		framePool[nb-1] = append(b, src...)
		return int32(nb - 1), off
	}
	framesOf := func(e *stackRec) []int32 {
		return framePool[e.block][e.off : e.off+int32(e.nf) : e.off+int32(e.nf)]
	}
	rawStacks := map[uint32]map[string]int32{}
	var frameBuf []int32
	var keyBuf, rawBuf []byte
	resolveIdx := func(pid uint32, pc uint64, kernel bool) int32 {
		pms := pcCache[pid]
		if pms == nil {
			pms = &[2]map[uint64]int32{}
			pcCache[pid] = pms
		}
		k := 0
		if kernel {
			k = 1
		}
		pm := pms[k]
		if pm == nil {
			pm = pcPool.get()
			pms[k] = pm
		}
		if idx, ok := pm[pc]; ok {
			return idx
		}
		idx, _ := resolve(pid, pc, kernel)
		pm[pc] = idx
		return idx
	}
	// Deferred naming counts ticks without a lookup per tick (ticks.go):
	// the addresses of a thread's ticks are kept until its process's
	// mappings change or the trace ends, then sorted and counted, each
	// distinct one located as of its time.
	var tc *tickCounter
	if deferred {
		tc = newTickCounter(func(t *tickThread, kernel bool, ip, n uint64) {
			pid, tid := t.pid, t.tid
			lk := uint64(1) << 63
			if !kernel {
				lk = slotOf(pid)
			}
			lt := locTable(lk)
			idx, known := lt[ip]
			if !known {
				idx, _ = resolve(pid, ip, kernel)
				lt[ip] = idx
			}
			addEntry(pid, tid, idx, n)
		})
	}
	// The slot of the last tick's process. haveLast false means none:
	// every pid value is a real one (the kernel reports -1 for a task
	// whose pid is gone, e.g. a tick in an exiting thread).
	lastPid, lastSlot, haveLast := uint32(0), uint64(0), false
	var err error
	if deferred && filt == nil && countParallel(f, r, rep, func(pid uint32, ip uint64, kernel bool) int32 {
		idx, _ := resolve(pid, ip, kernel)
		return idx
	}, func(pid uint32) func(ip uint64) int32 {
		// the process's mappings at hand, a module's Loc made only when
		// new (Locate's Loc, 152 bytes, was most of a count's cost)
		cur := r.Cursor(pid)
		return func(ip uint64) int32 {
			if m, off, ok := cur.Module(ip); ok {
				return locSet.indexModule(m, off, func() a2n.Loc { return r.Locate(pid, ip, false) }, addLoc)
			}
			idx, _ := resolve(pid, ip, false)
			return idx
		}
	}, func(l a2n.Loc) int32 {
		return locSet.index(l, addLoc)
	}, func(pid, tid uint32, res int32, n uint64) {
		addEntry(pid, tid, res, n)
	}, func(pid, tid uint32, frames []int32, kernel uint16, truncated bool, n uint64) {
		if nstk%stkBlock == 0 {
			stkBlocks = append(stkBlocks, make([]stackRec, 0, stkBlock))
		}
		block, off := keepFrames(frames)
		stkBlocks[len(stkBlocks)-1] = append(stkBlocks[len(stkBlocks)-1], stackRec{pid: pid, tid: tid, block: block, off: off,
			nf: uint16(len(frames)), kernel: kernel, truncated: truncated, n: n})
		nstk++
	}) {
		tc = nil // counted
	} else {
		err = f.Records(func(rec *trace.Record) error {
			switch rec.Major {
			case trace.MajorMTE, trace.MajorJITLoad:
				pid, changes := isChange(rec)
				if changes && tc != nil {
					// The pid's ticks so far are located in the state they
					// were in, before this record changes it.
					tc.flushPid(pid)
				}
				r.Apply(rec)
				if changes {
					if rec.Major == trace.MajorMTE && rec.Minor == trace.MTEFork && filt != nil && filt.Children && filt.Pids[uint32(rec.Field(0))] {
						filt.Pids[pid] = true // a process (or thread) the selection created
					}
					if s, ok := pidSlot[pid]; ok {
						pcPool.put(locOf[s])
						delete(locOf, s)
						if lastLocKey == s {
							lastLocs = nil
						}
					}
					delete(pidSlot, pid) // the next tick takes a new slot
					if pms := pcCache[pid]; pms != nil {
						pcPool.put(pms[0])
						pcPool.put(pms[1])
					}
					delete(pcCache, pid)
					rawPool.put(rawStacks[pid])
					delete(rawStacks, pid)
					if pid == lastPid {
						haveLast = false
					}
				}
				if onRecord != nil {
					onRecord(rec, nil)
				}
			case trace.MajorTprof:
				pid, tid, ip := uint32(rec.Field(0)), uint32(rec.Field(1)), rec.Field(2)
				if filt != nil && !filt.match(pid, tid, func() string { return r.ProcessName(pid) }) {
					rep.Filtered++
					if onRecord != nil {
						onRecord(rec, nil)
					}
					return nil
				}
				kernel := rec.Field(3)&trace.TprofKernel != 0
				if tc != nil {
					t, isNew := tc.thread(rec.CPU, pid, tid, 0)
					if isNew {
						if _, ok := rep.ThreadNm[[2]uint32{pid, tid}]; !ok {
							rep.ThreadNm[[2]uint32{pid, tid}] = r.ThreadName(pid, tid)
							rep.ProcName[pid] = r.ProcessName(pid)
						}
						prefetch(pid, ip, kernel)
					} else if rep.Total&1023 == 0 {
						prefetch(pid, ip, kernel)
					}
					tc.add(t, kernel, ip)
					rep.Total++
					if rep.First == 0 || rec.Time < rep.First {
						rep.First = rec.Time
					}
					if rec.Time > rep.Last {
						rep.Last = rec.Time
					}
					return nil
				}
				if pid != lastPid || !haveLast {
					lastPid, lastSlot, haveLast = pid, slotOf(pid), true
				}
				k := tickKey{ip: ip, w: lastSlot<<32 | uint64(tid)}
				if kernel {
					k.w |= 1 << 63
				}
				i, ok := tickIdx[k]
				if !ok {
					idx, off := resolve(pid, ip, kernel) // (deferred naming counts in tc above)
					i = newEntry(pid, tid, idx, off)
					tickIdx[k] = i
					if _, ok := rep.ThreadNm[[2]uint32{pid, tid}]; !ok {
						rep.ThreadNm[[2]uint32{pid, tid}] = r.ThreadName(pid, tid)
						rep.ProcName[pid] = r.ProcessName(pid)
					}
				}
				e := &all[i/entryBlock][i%entryBlock]
				if uint64(e.n) == entryMax { // full: the next ticks in a new one
					i = newEntry(pid, tid, e.res, offs[i/entryBlock][i%entryBlock])
					tickIdx[k] = i
					e = &all[i/entryBlock][i%entryBlock]
				}
				e.n++
				if onRecord != nil {
					res := results[e.res]
					res.Offset = offs[i/entryBlock][i%entryBlock]
					onRecord(rec, &res)
				}
				rep.Total++
				if rep.First == 0 || rec.Time < rep.First {
					rep.First = rec.Time
				}
				if rec.Time > rep.Last {
					rep.Last = rec.Time
				}
			case trace.MajorUnwind:
				if onRecord != nil {
					onRecord(rec, nil)
				}
				pid, tid, flags := uint32(rec.Field(0)), uint32(rec.Field(1)), rec.Field(2)
				if filt != nil && !filt.match(pid, tid, func() string { return r.ProcessName(pid) }) {
					return nil
				}
				n := len(rec.Str) / 8
				if n == 0 {
					return nil
				}
				rs := rawStacks[pid]
				if rs == nil {
					rs = rawPool.get()
					rawStacks[pid] = rs
				}
				rawBuf = append(rawBuf[:0], byte(tid), byte(tid>>8), byte(tid>>16), byte(tid>>24), byte(flags), byte(flags>>8), byte(flags>>16), byte(flags>>24))
				rawBuf = append(rawBuf, rec.Str[:8*n]...)
				if i, ok := rs[string(rawBuf)]; ok {
					e := stkAt(i)
					e.n++
					rep.StackTicks++
					if e.truncated {
						rep.TruncatedStacks++
					}
					return nil
				}
				nk := int(flags >> trace.UnwindKernShift)
				frameBuf = frameBuf[:0]
				for i := n - 1; i >= 0; i-- { // root first
					pc := le64(rec.Str[8*i:])
					if i > 0 && i != nk {
						pc-- // a return address: name the call, not what follows it
					}
					frameBuf = append(frameBuf, resolveIdx(pid, pc, i < nk))
				}
				if len(frameBuf) == 0 {
					return nil
				}
				keyBuf = append(keyBuf[:0], byte(pid), byte(pid>>8), byte(pid>>16), byte(pid>>24), byte(tid), byte(tid>>8), byte(tid>>16), byte(tid>>24), byte(flags&trace.UnwindTruncated))
				for _, f := range frameBuf {
					keyBuf = append(keyBuf, byte(f), byte(f>>8), byte(f>>16), byte(f>>24))
				}
				i, ok := stacks[string(keyBuf)]
				if !ok {
					if nstk%stkBlock == 0 {
						stkBlocks = append(stkBlocks, make([]stackRec, 0, stkBlock))
					}
					block, off := keepFrames(frameBuf)
					i = nstk
					stkBlocks[len(stkBlocks)-1] = append(stkBlocks[len(stkBlocks)-1], stackRec{pid: pid, tid: tid, block: block, off: off,
						nf: uint16(len(frameBuf)), kernel: uint16(min(nk, n)), truncated: flags&trace.UnwindTruncated != 0})
					nstk++
					stacks[string(keyBuf)] = i
				}
				rs[string(rawBuf)] = i
				e := stkAt(i)
				e.n++
				rep.StackTicks++
				if e.truncated {
					rep.TruncatedStacks++
				}
			default:
				if rec.Major == trace.MajorSys && rec.Minor == trace.SysEvent {
					rep.Event, rep.EventPeriod = rec.Str, rec.Field(2)
				}
				if onRecord != nil {
					onRecord(rec, nil)
				}
			}
			return nil
		})
	}
	if tc != nil {
		tc.flushAll()
	}
	var resOf []int32 // deferred naming: each Loc's result (entries hold Locs)
	if deferred {
		// Every Loc named (in the order they were met, which gives the
		// names the order naming at once gives), then the stacks that
		// became equal counted together, each where it was first met.
		if len(locs) > 0 {
			toName <- locs[len(locs)-1]
		}
		close(toName)
		<-namedAll
		resOf = locRes // (the entries hold Locs: makeCells maps them)
		for _, b := range stkBlocks {
			for i := range b {
				fr := framesOf(&b[i])
				for j, l := range fr {
					fr[j] = locRes[l]
				}
			}
		}
	}
	// The report's stacks (in deferred naming, those that became equal
	// counted together, each where it was first met).
	stk := make([]stackEntry, 0, nstk)
	var byKey map[string]int32
	if deferred {
		byKey = make(map[string]int32, nstk)
	}
	for _, b := range stkBlocks {
		for i := range b {
			e := &b[i]
			fr := framesOf(e)
			if deferred {
				keyBuf = append(keyBuf[:0], byte(e.pid), byte(e.pid>>8), byte(e.pid>>16), byte(e.pid>>24), byte(e.tid), byte(e.tid>>8), byte(e.tid>>16), byte(e.tid>>24), 0)
				if e.truncated {
					keyBuf[8] = 1
				}
				for _, f := range fr {
					keyBuf = append(keyBuf, byte(f), byte(f>>8), byte(f>>16), byte(f>>24))
				}
				if j, ok := byKey[string(keyBuf)]; ok {
					stk[j].n += e.n
					continue
				}
				byKey[string(keyBuf)] = int32(len(stk))
			}
			stk = append(stk, stackEntry{pid: e.pid, tid: e.tid, frames: fr, kernel: int(e.kernel), truncated: e.truncated, n: e.n})
		}
	}
	// Most ticks first; ties in a fixed order (pid, tid, first seen).
	sort.SliceStable(stk, func(i, j int) bool {
		a, b := &stk[i], &stk[j]
		if a.n != b.n {
			return a.n > b.n
		}
		if a.pid != b.pid {
			return a.pid < b.pid
		}
		return a.tid < b.tid
	})
	rep.stk, rep.res, rep.names = stk, results, names
	// A cell is one Key (names are interned: one number, one name).
	// A result is one (module, symbol) (interned as named), so a cell is
	// one (thread, result). The cells are made on two goroutines, each
	// those of half the threads (by a hash of the thread), in two passes
	// and no map of cells: the first finds the runs of entries of one
	// thread (entries come thread by thread, a thread in several runs:
	// its states, user and kernel, the readers), the second takes the
	// runs thread after thread and finds a result's cell in a table by
	// result, stamped with the thread (no map lookup per distinct
	// (thread, address): over a many-process report's hundreds of
	// thousands of entries those lookups were most of the cells' time).
	// The order of the cells is the sections' (cellOrder),
	// not this one.
	var parts [2][]cell
	var partThreads [2][]cell // each part's threads (pid, tid), once
	var wg sync.WaitGroup
	for half := range uint64(2) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			parts[half], partThreads[half] = makeCells(all, nent, half, resOf, resMod, resSym)
		}()
	}
	wg.Wait()
	rep.cells = append(parts[0], parts[1]...)
	rep.threads = append(partThreads[0], partThreads[1]...)
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

// entry is ticks of one thread (in one state of its process) at one
// result, or at one Loc while naming is deferred (makeCells maps it to its
// result). BuildFiltered's counters; 16 bytes: a count over 2^32 - 1
// takes more than one.
type entry struct {
	pid, tid uint32
	res      int32
	n        uint32
}

// entryBlock is how many entries a block of them holds (blocks: no
// copying as they grow; without pointers: the collector has nothing to
// scan).
const entryBlock = 4096

// makeCells sums the entries (nent of them in blocks all) of the threads
// of half (0 or 1: a hash of the thread's pid and tid) by thread and
// result, and returns the cells and the threads (a cell each). An
// entry's res is a result, or with resOf a Loc whose result resOf gives
// (mapped here, on two goroutines, rather than in a pass of its own over
// the entries).
func makeCells(all [][]entry, nent int32, half uint64, resOf, resMod, resSym []int32) (cells, threads []cell) {
	// pass 1: the runs of each thread, chained in the order met
	type run struct{ lo, hi, next int32 }
	var runs []run
	var first, last []int32 // of each thread: its first and last run
	thrNum := map[uint64]int32{}
	lastThr, cur := uint64(0), int32(-1) // cur: the run being extended (-1: the other half's)
	for i := int32(0); i < nent; i++ {
		e := &all[i/entryBlock][i%entryBlock]
		t := uint64(e.pid)<<32 | uint64(e.tid)
		if i > 0 && t == lastThr {
			if cur >= 0 {
				runs[cur].hi = i + 1
			}
			continue
		}
		lastThr, cur = t, -1
		if (t*fibMul)>>63 != half {
			continue
		}
		n, ok := thrNum[t]
		if !ok {
			n = int32(len(threads))
			thrNum[t] = n
			threads = append(threads, cell{pid: e.pid, tid: e.tid})
			first, last = append(first, -1), append(last, -1)
		}
		cur = int32(len(runs))
		runs = append(runs, run{lo: i, hi: i + 1, next: -1})
		if last[n] < 0 {
			first[n] = cur
		} else {
			runs[last[n]].next = cur
		}
		last[n] = cur
	}
	// pass 2: thread by thread, a result's cell in a table stamped with
	// the thread (its number + 1)
	stamp := make([]int32, len(resMod))
	at := make([]int32, len(resMod))
	cells = make([]cell, 0, nent/4)
	for n, th := range threads {
		mark := int32(n + 1)
		for r := first[n]; r >= 0; r = runs[r].next {
			for i := runs[r].lo; i < runs[r].hi; i++ {
				e := &all[i/entryBlock][i%entryBlock]
				res := e.res
				if resOf != nil {
					res = resOf[res]
				}
				ci := at[res]
				if stamp[res] != mark {
					stamp[res], ci = mark, int32(len(cells))
					at[res] = ci
					cells = append(cells, cell{pid: th.pid, tid: th.tid, mod: resMod[res], sym: resSym[res]})
				}
				cells[ci].n += uint64(e.n)
			}
		}
	}
	return cells, threads
}

// TickCounts returns the ticks per process, thread, module and symbol
// (built on each call: the report's sections do not need it).
func (rep *Report) TickCounts() map[Key]uint64 {
	m := make(map[Key]uint64, len(rep.cells))
	for _, c := range rep.cells {
		m[Key{c.pid, c.tid, rep.names[c.mod], rep.names[c.sym]}] = c.n
	}
	return m
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

// ProcLabel is PI's process name form: name_pid (pid in hex).
func (rep *Report) ProcLabel(pid uint32) string {
	return fmt.Sprintf("%s_%x", rep.ProcName[pid], pid)
}

// ProcTitle is a process as the modern forms (pprof, folded stacks, flame
// graphs) name it: "name (pid N)", in decimal; PI's name_hex (ProcLabel)
// stays in tprof.out, which users compare with PI's.
func (rep *Report) ProcTitle(pid uint32) string {
	n := rep.ProcName[pid]
	if n == "" {
		n = "?"
	}
	return fmt.Sprintf("%s (pid %d)", n, pid)
}

// ThreadTitle is a thread as the modern forms name it: "name (tid N)".
func (rep *Report) ThreadTitle(pid, tid uint32) string {
	return fmt.Sprintf("%s (tid %d)", rep.threadName(pid, tid, "?"), tid)
}

// threadName is a thread's name, else its process's (a new thread starts
// with its creator's comm), else unknown.
func (rep *Report) threadName(pid, tid uint32, unknown string) string {
	if n := rep.ThreadNm[[2]uint32{pid, tid}]; n != "" {
		return n
	}
	if n := rep.ProcName[pid]; n != "" {
		return n
	}
	return unknown
}

// ThreadLabel is PI's thread name form: name_tid (tid in hex). A thread
// no record named carries its process's name, as a new thread starts with
// its creator's comm.
func (rep *Report) ThreadLabel(pid, tid uint32) string {
	return fmt.Sprintf("%s_%x", rep.threadName(pid, tid, "tid"), tid)
}

// Levels of a section.
const (
	LPid = iota
	LTid
	LMod
	LSym
)

// Section aggregates ticks along the given levels, e.g. {LPid, LMod}: the
// cells sorted by the levels' keys, each run of equal keys one row (no
// table per row), each level's rows by ticks, then name.
func (rep *Report) Section(levels ...int) []*Row {
	stack := []*[]*Row{new([]*Row)}
	rep.labelAll()
	rep.eachRow(levels, rep.cellOrder(levels), func(depth int, label string, ticks uint64, name string) {
		r := &Row{Label: label, Ticks: ticks, Name: name}
		stack = stack[:depth+1]
		*stack[depth] = append(*stack[depth], r)
		stack = append(stack, &r.Sub)
	})
	return *stack[0]
}

// levelKey is a cell's key at one level (process, thread, module or
// symbol number).
func levelKey(c *cell, l int) uint32 {
	switch l {
	case LPid:
		return c.pid
	case LTid:
		return c.tid
	case LMod:
		return uint32(c.mod)
	}
	return uint32(c.sym)
}

// cellOrder is the cells' indexes sorted by the keys of levels, in order.
func (rep *Report) cellOrder(levels []int) []int32 {
	return rep.cellOrderWith(levels, &rep.orderKeys)
}

// cellOrderWith is cellOrder with the key arrays of scratch (kept for the
// next order: fresh memory is dear; one scratch a goroutine).
func (rep *Report) cellOrderWith(levels []int, scratch *[2][]sortKey) []int32 {
	// Each cell's level keys packed in two words (up to four levels), so
	// that the sort compares two integers.
	if len(scratch[0]) != len(rep.cells) {
		*scratch = [2][]sortKey{make([]sortKey, len(rep.cells)), make([]sortKey, len(rep.cells))}
	}
	keys := scratch[0]
	var shifts [4]uint
	for d := range levels[:min(len(levels), 4)] {
		shifts[d] = uint(32 * (1 - d%2))
	}
	for i := range rep.cells {
		c := &rep.cells[i]
		var k [2]uint64
		for d, l := range levels[:min(len(levels), 4)] {
			k[d/2] |= uint64(levelKey(c, l)) << shifts[d]
		}
		keys[i] = sortKey{k[0], k[1], int32(i)}
	}
	if len(levels) <= 4 {
		// The keys are the whole order: a radix sort (a comparison
		// sort of a many-process trace's cells was a tenth of post).
		keys = radixSortKeys(keys, scratch[1])
		order := make([]int32, len(keys))
		for i, k := range keys {
			order[i] = k.i
		}
		return order
	}
	slices.SortFunc(keys, func(a, b sortKey) int {
		if a.hi != b.hi {
			return cmp.Compare(a.hi, b.hi)
		}
		if a.lo != b.lo {
			return cmp.Compare(a.lo, b.lo)
		}
		ca, cb := &rep.cells[a.i], &rep.cells[b.i]
		for _, l := range levels[4:] {
			if c := cmp.Compare(levelKey(ca, l), levelKey(cb, l)); c != 0 {
				return c
			}
		}
		return 0
	})
	order := make([]int32, len(keys))
	for i, k := range keys {
		order[i] = k.i
	}
	return order
}

// sortKey is a cell's level keys in two words and the cell's index.
type sortKey struct {
	hi, lo uint64
	i      int32
}

// radixPass returns where each byte value's keys start in a pass whose
// keys' byte values were counted in c, and whether the pass can be
// skipped: every one of the n keys has the byte of the first.
func radixPass(c *[256]int, n int, first byte) (pos [256]int, skip bool) {
	if c[first] == n {
		return pos, true
	}
	sum := 0
	for i := range c {
		pos[i] = sum
		sum += c[i]
	}
	return pos, false
}

// radixSortKeys sorts a by (hi, lo), keeping the order of equal keys
// (using tmp, of a's length), and returns the sorted slice (a or tmp):
// least significant byte first, skipping the bytes in which all keys agree.
func radixSortKeys(a, tmp []sortKey) []sortKey {
	if len(a) < 2 {
		return a
	}
	var counts [16][256]int
	for i := range a {
		lo, hi := a[i].lo, a[i].hi
		counts[0][byte(lo)]++
		counts[1][byte(lo>>8)]++
		counts[2][byte(lo>>16)]++
		counts[3][byte(lo>>24)]++
		counts[4][byte(lo>>32)]++
		counts[5][byte(lo>>40)]++
		counts[6][byte(lo>>48)]++
		counts[7][byte(lo>>56)]++
		counts[8][byte(hi)]++
		counts[9][byte(hi>>8)]++
		counts[10][byte(hi>>16)]++
		counts[11][byte(hi>>24)]++
		counts[12][byte(hi>>32)]++
		counts[13][byte(hi>>40)]++
		counts[14][byte(hi>>48)]++
		counts[15][byte(hi>>56)]++
	}
	src, dst := a, tmp
	for d := 0; d < 16; d++ {
		shift := uint(8 * (d % 8))
		first := src[0].lo
		if d >= 8 {
			first = src[0].hi
		}
		pos, skip := radixPass(&counts[d], len(src), byte(first>>shift))
		if skip {
			continue
		}
		if d < 8 {
			for i := range src {
				b := byte(src[i].lo >> shift)
				dst[pos[b]] = src[i]
				pos[b]++
			}
		} else {
			for i := range src {
				b := byte(src[i].hi >> shift)
				dst[pos[b]] = src[i]
				pos[b]++
			}
		}
		src, dst = dst, src
	}
	return src
}

// eachRow calls row for every row of the section of levels, parents
// before their children, each level's rows by ticks, then name. order is
// the cells sorted so that the cells of one row are together at every
// level (cellOrder of levels, or of levels followed by more).
func (rep *Report) eachRow(levels []int, order []int32, row func(depth int, label string, ticks uint64, name string)) {
	scratch := make([][]rowGroup, len(levels))
	tmps := make([][]rowGroup, len(levels)) // radixGroups' output, a level's own
	var keys [2][]sortKey                   // and its keys' (one call at a time)
	var walk func(lo, hi int32, d int)
	walk = func(lo, hi int32, d int) {
		l := levels[d]
		gs := scratch[d][:0]
		packed := true
		for i := lo; i < hi; {
			c := &rep.cells[order[i]]
			k := levelKey(c, l)
			j := i
			var n uint64
			for j < hi && levelKey(&rep.cells[order[j]], l) == k {
				n += rep.cells[order[j]].n
				j++
			}
			gs = append(gs, rowGroup{key: uint64(^uint32(n))<<32 | uint64(rep.levelRank(c, l)), lo: i, hi: j, n: n})
			packed = packed && n <= math.MaxUint32
			i = j
		}
		if packed && len(gs) >= radixGroupsMin {
			if cap(tmps[d]) < len(gs) {
				tmps[d] = make([]rowGroup, len(gs))
			}
			gs, tmps[d] = radixGroups(gs, tmps[d][:len(gs)], &keys), gs
		} else {
			sortGroups(gs, packed)
		}
		label := levelLabels[l]
		for _, g := range gs {
			row(d, label, g.n, rep.levelName(&rep.cells[order[g.lo]], l))
			if d+1 < len(levels) {
				walk(g.lo, g.hi, d+1)
			}
		}
		scratch[d] = gs[:0]
	}
	if len(levels) > 0 {
		walk(0, int32(len(order)), 0)
	}
}

// rowGroup is the cells order[lo:hi] of one row and its ticks; key is
// its order in one word: ticks down (when they fit in 32 bits), then its
// name's rank (labelAll: compares as the name) in the low 32 bits.
type rowGroup struct {
	key    uint64
	n      uint64
	lo, hi int32
}

// sortGroups puts rows in order: most ticks first, equal ticks by name.
// With packed keys (every group's ticks in 32 bits) a comparison is one
// of integers, and a few rows (most groups of a many-process report) are
// sorted by insertion; many rows go to radixGroups.
func sortGroups(gs []rowGroup, packed bool) {
	if !packed {
		slices.SortFunc(gs, func(a, b rowGroup) int {
			if a.n != b.n {
				return cmp.Compare(b.n, a.n)
			}
			return cmp.Compare(uint32(a.key), uint32(b.key))
		})
		return
	}
	if len(gs) > 16 {
		slices.SortFunc(gs, func(a, b rowGroup) int { return cmp.Compare(a.key, b.key) })
		return
	}
	for i := 1; i < len(gs); i++ {
		g := gs[i]
		j := i
		for ; j > 0 && gs[j-1].key > g.key; j-- {
			gs[j] = gs[j-1]
		}
		gs[j] = g
	}
}

// radixGroupsMin is the number of rows from which radixGroups sorts them
// (the symbols of a module over all processes, of the kernel in one
// process: thousands of rows, whose comparison sorts were a fifth of
// writing a many-process report).
const radixGroupsMin = 128

// radixGroups sorts packed groups by key (as sortGroups) into tmp (of
// gs's length) and returns it: radixSortKeys of their keys (in the low
// word, their places as indexes), keys the scratch of those.
func radixGroups(gs, tmp []rowGroup, keys *[2][]sortKey) []rowGroup {
	if cap(keys[0]) < len(gs) {
		*keys = [2][]sortKey{make([]sortKey, len(gs)), make([]sortKey, len(gs))}
	}
	k := keys[0][:len(gs)]
	for i := range gs {
		k[i] = sortKey{lo: gs[i].key, i: int32(i)}
	}
	for j, sk := range radixSortKeys(k, keys[1][:len(gs)]) {
		tmp[j] = gs[sk.i]
	}
	return tmp
}

// labelAll fills levelName's tables of process and thread labels for
// every cell and levelRank's ranks of every row name (after that both
// only read them). A rank orders rows as their names would: equal names,
// equal ranks (comparing strings was a tenth of a many-process report).
func (rep *Report) labelAll() {
	if rep.nameRank != nil {
		return
	}
	rep.labelThreads()
	rep.rankNames()
}

// labelThreads is labelAll's labels of processes and threads and their
// ranks.
func (rep *Report) labelThreads() {
	cells := rep.threads // a cell of each thread (ten times fewer than the cells)
	if cells == nil {
		cells = rep.cells
	}
	for i := range cells {
		rep.levelName(&cells[i], LPid)
		rep.levelName(&cells[i], LTid)
	}
	rep.procRank = rankLabels(rep.procLabels)
	rep.threadRank = rankLabels(rep.threadLabels)
}

// rankNames is labelAll's ranks of the module and symbol names (made
// beside labelThreads by WritePI: they share nothing).
func (rep *Report) rankNames() {
	if rep.nameRank == nil {
		rep.nameRank = rankStrings(len(rep.names), func(i int) string { return rep.names[i] })
	}
}

// rankLabels is the rank of each label of labels among them (rankStrings).
func rankLabels[K comparable](labels map[K]string) map[K]uint32 {
	keys := make([]K, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	ranks := rankStrings(len(keys), func(i int) string { return labels[keys[i]] })
	out := make(map[K]uint32, len(keys))
	for i, k := range keys {
		out[k] = ranks[i]
	}
	return out
}

// rankStrings returns the rank of each of n strings in their sorted
// order, equal strings one rank.
func rankStrings(n int, str func(i int) string) []uint32 {
	idx := make([]int32, n)
	for i := range idx {
		idx[i] = int32(i)
	}
	slices.SortFunc(idx, func(a, b int32) int { return strings.Compare(str(int(a)), str(int(b))) })
	rank := make([]uint32, n)
	r := uint32(0)
	for i, j := range idx {
		if i > 0 && str(int(j)) != str(int(idx[i-1])) {
			r++
		}
		rank[j] = r
	}
	return rank
}

// levelRank is the rank of a cell's row name at level l (labelAll).
func (rep *Report) levelRank(c *cell, l int) uint32 {
	switch l {
	case LPid:
		return rep.procRank[c.pid]
	case LTid:
		return rep.threadRank[[2]uint32{c.pid, c.tid}]
	case LMod:
		return rep.nameRank[c.mod]
	}
	return rep.nameRank[c.sym]
}

var levelLabels = [...]string{LPid: "PID", LTid: "TID", LMod: "MOD", LSym: "SYM"}

// levelName is the name of a cell's row at level l.
func (rep *Report) levelName(c *cell, l int) string {
	switch l {
	case LPid:
		if rep.procLabels == nil {
			rep.procLabels = map[uint32]string{}
		}
		n, ok := rep.procLabels[c.pid]
		if !ok {
			n = rep.ProcLabel(c.pid)
			rep.procLabels[c.pid] = n
		}
		return n
	case LTid:
		if rep.threadLabels == nil {
			rep.threadLabels = map[[2]uint32]string{}
		}
		k := [2]uint32{c.pid, c.tid}
		n, ok := rep.threadLabels[k]
		if !ok {
			n = rep.ThreadLabel(c.pid, c.tid)
			rep.threadLabels[k] = n
		}
		return n
	case LMod:
		return rep.names[c.mod]
	}
	return rep.names[c.sym]
}

func le64(s string) uint64 {
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}
