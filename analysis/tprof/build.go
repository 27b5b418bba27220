package tprof

import (
	"sort"
	"sync"
	"time"

	"perfinsp/analysis/a2n"
	"perfinsp/format/nrm2"
	"perfinsp/format/trace"
)

// builder holds what BuildFiltered keeps while it reads a trace: the
// names met (an interner), the Locs waiting to be named, the counters
// and the call stacks. Its methods are the steps of a report's making:
// count (a counter: on every CPU at once, or by the one reader), then
// endNaming, stacks and cells.
//
// Naming is deferred: an address gets a Loc (the mapping it was in at its
// time), the modules the Locs need load in the background (a2n Prefetch)
// while the trace is read, and the Locs are named beside the reading
// (nameLocs); counters and stacks hold Loc indexes until the end.
type builder struct {
	f        *nrm2.File
	r        *a2n.Resolver
	rep      *Report
	filt     *Filter
	onRecord func(rec *trace.Record, res *a2n.Result)
	unnamed  bool // onRecord's ticks go unnamed (Options.Unnamed)
	// java: JProf Java stacks may name interpreter ticks (a2n.JavaTick,
	// which reads the process's JIT records as of the tick: the one
	// reader, in trace order)
	java bool
	// keepAddrs: the report keeps the ticks by address (BuildWithAddresses).
	keepAddrs bool
	locStacks []locStack
	progress  *Progress // nil: not counted

	// in interns the names (results); only nameLocs writes it, on its own
	// goroutine, until endNaming.
	in *interner

	// Locs are kept in blocks (no copying as they grow); a module's Loc
	// is found by module number and file offset, a final name by itself
	// (the distinct Locs; a module met first starts loading).
	locs     [][]a2n.Loc
	nlocs    int32
	locSet   *locSet
	addLocFn func(l a2n.Loc) int32 // addLoc, made once (a method value passed on allocates)
	toName   chan []a2n.Loc        // full blocks of Locs to name
	namedAll chan struct{}         // closed when every Loc is named
	locRes   []int32               // each Loc's name, an index into in.results (nameLocs)

	// Counters are kept in blocks (entryBlock).
	all  [][]entry
	nent int32

	// Stacks: frames as Loc indexes, identical stacks counted together
	// (counter.locateStacks).
	leaf     *leafFrames // the callers frame-pointer stacks lose (leafframe.go)
	stk      stackSet
	frameBuf []int32
}

// locBlock is the number of Locs a block holds.
const locBlock = 4096

// interner numbers names: one number a name (names), a result (one
// module and symbol) by its two numbers (resMod, resSym). The cells need
// them, and interning them after the naming would be a pause on the
// critical path of a many-process report.
type interner struct {
	results        []a2n.Result
	names          []string
	resMod, resSym []int32
	nameNum        map[string]int32
	intern         map[uint64]int32
}

func (in *interner) name(n string) int32 {
	i, ok := in.nameNum[n]
	if !ok {
		i = int32(len(in.names))
		in.nameNum[n] = i
		in.names = append(in.names, n)
	}
	return i
}

// result is res's number.
func (in *interner) result(res a2n.Result) int32 {
	m, s := in.name(res.Module), in.name(res.Symbol)
	k := uint64(uint32(m))<<32 | uint64(uint32(s))
	idx, known := in.intern[k]
	if !known {
		idx = int32(len(in.results))
		in.intern[k] = idx
		in.results = append(in.results, res)
		in.resMod, in.resSym = append(in.resMod, m), append(in.resSym, s)
	}
	return idx
}

// newBuilder starts a report of f: its header fields filled, the naming
// goroutine started.
func newBuilder(f *nrm2.File, r *a2n.Resolver, filt *Filter, onRecord func(rec *trace.Record, res *a2n.Result)) *builder {
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
	b := &builder{
		f: f, r: r, rep: rep, filt: filt, onRecord: onRecord,
		in:       &interner{nameNum: map[string]int32{}, intern: map[uint64]int32{}},
		stk:      newStackSet(),
		namedAll: make(chan struct{}),
		toName:   make(chan []a2n.Loc, 1024),
		leaf:     newLeafFrames(r),
		java:     r.HasJavaStacks(time.Unix(0, int64(f.Header.StartWallNs))),
	}
	b.addLocFn = b.addLoc
	b.locSet = &locSet{newMod: func(m string) {
		if m != "[vdso]" {
			r.Cache.Prefetch(m)
		}
	}}
	go b.nameLocs(b.toName, b.in)
	return b
}

// build makes the report: the ticks and stacks counted (on every CPU at
// once when the trace allows it, else by the one reader: the same
// counter), the names made, the cells summed.
func (b *builder) build() *Report {
	var err error
	defer b.leaf.close()
	if b.filt != nil || b.onRecord != nil || b.java || !countParallel(b) {
		b.progress.restart()
		err = countSerial(b)
	}
	resOf := b.endNaming()
	rep := b.rep
	rep.stk, rep.res, rep.names = b.stacks(), b.in.results, b.in.names
	b.cells(resOf)
	if b.keepAddrs {
		rep.addrs = &addrTicks{locs: b.locs, names: resOf, entries: b.all, nent: b.nent, r: b.r, stacks: b.locStacks}
	}
	rep.RecordErr = err
	// Names known by the end of the trace are the best ones (exec renames).
	for pid := range rep.ProcName {
		rep.ProcName[pid] = b.r.ProcessName(pid)
	}
	for k := range rep.ThreadNm {
		if n := b.r.ThreadName(k[0], k[1]); n != "" {
			rep.ThreadNm[k] = n
		}
	}
	rep.Problems = b.r.Cache.Problems()
	return rep
}

// nameLocs names the blocks of Locs that come on toName, beside the
// reading: a block once it is full (on this goroutine, in the order met),
// the last one when the reading ends. Naming uses the module cache and the
// Locs alone, not the processes' mappings the reading changes. The Locs
// of a module that one symbol names are named once, found by the symbol's
// start, the last module's table at hand (Finish demangles and copies the
// name each time, and interning its result hashed two strings: three
// quarters of the naming of a many-process trace's 47 k Locs).
func (b *builder) nameLocs(toName <-chan []a2n.Loc, in *interner) {
	defer close(b.namedAll)
	r := b.r
	bySym := map[string]map[uint64]int32{}
	var path string
	var mod *a2n.Module
	var syms map[uint64]int32
	// (the names kept in a variable of this goroutine, given at the end:
	// a shared variable written at each Loc may share a line of the cache
	// with what the replay writes)
	var named []int32
	defer func() { b.locRes = named }()
	for blk := range toName {
		for i := range blk {
			l := &blk[i]
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
						idx = in.result(r.Finish(*l))
						syms[start] = idx
					}
					named = append(named, idx)
					continue
				}
			}
			named = append(named, in.result(r.Finish(*l)))
		}
	}
}

// addLoc keeps a new Loc and returns its index; a block that fills goes
// to nameLocs.
func (b *builder) addLoc(l a2n.Loc) int32 {
	if b.nlocs%locBlock == 0 {
		if len(b.locs) > 0 {
			b.toName <- b.locs[len(b.locs)-1] // full: it does not change again
		}
		b.locs = append(b.locs, make([]a2n.Loc, 0, locBlock))
	}
	b.locs[len(b.locs)-1] = append(b.locs[len(b.locs)-1], l)
	b.nlocs++
	return b.nlocs - 1
}

// endNaming waits for every Loc to be named (in the order they were met)
// and makes the stacks' frames names. It returns each Loc's name.
func (b *builder) endNaming() []int32 {
	if len(b.locs) > 0 {
		b.toName <- b.locs[len(b.locs)-1]
	}
	close(b.toName)
	<-b.namedAll
	if b.keepAddrs {
		b.locStacks = b.stk.byLoc()
	}
	b.stk.rename(b.locRes)
	return b.locRes // (the entries hold Locs: makeCells maps them)
}

// locate returns the index of addr's Loc.
func (b *builder) locate(pid uint32, addr uint64, kernel bool) int32 {
	return b.locSet.index(b.r.Locate(pid, addr, kernel), b.addLocFn)
}

// index numbers a Loc as locate numbers it.
func (b *builder) index(l a2n.Loc) int32 { return b.locSet.index(l, b.addLocFn) }

// userLocator locates one process's user addresses (while no record is
// applied): the process's mappings at hand, a module's Loc made only when
// new (Locate's Loc, 152 bytes, was most of a count's cost).
type userLocator struct {
	b   *builder
	pid uint32
	cur a2n.Cursor
}

func (b *builder) userLocator(pid uint32) userLocator {
	return userLocator{b: b, pid: pid, cur: b.r.Cursor(pid)}
}

func (u *userLocator) locate(ip uint64) int32 {
	if m, off, ok := u.cur.Module(ip); ok {
		return u.b.locSet.indexModule(m, off, func() a2n.Loc { return u.b.r.Locate(u.pid, ip, false) }, u.b.addLocFn)
	}
	return u.b.locate(u.pid, ip, false)
}

// prefetch starts loading the module of a user address early (the
// counting locates addresses only when a process's state ends).
func (b *builder) prefetch(pid uint32, addr uint64, kernel bool) {
	if kernel {
		return
	}
	l := b.r.Locate(pid, addr, false)
	if m := l.Module(); m != "" {
		b.locSet.module(m)
	}
}

// addEntry adds n ticks of (pid, tid) at Loc res.
func (b *builder) addEntry(pid, tid uint32, res int32, n uint64) {
	for n > 0 {
		m := min(n, entryMax)
		if b.nent%entryBlock == 0 {
			b.all = append(b.all, make([]entry, 0, entryBlock))
		}
		b.all[len(b.all)-1] = append(b.all[len(b.all)-1], entry{pid: pid, tid: tid, res: res, n: uint32(m)})
		b.nent++
		n -= m
	}
}

// selected reports whether the filter selects (pid, tid).
func (b *builder) selected(pid, tid uint32) bool {
	return b.filt == nil || b.filt.match(pid, tid, func() string { return b.r.ProcessName(pid) })
}

// nameThread names (pid, tid) and its process as of now, the first time.
func (b *builder) nameThread(pid, tid uint32) {
	if _, ok := b.rep.ThreadNm[[2]uint32{pid, tid}]; !ok {
		b.rep.ThreadNm[[2]uint32{pid, tid}] = b.r.ThreadName(pid, tid)
		b.rep.ProcName[pid] = b.r.ProcessName(pid)
	}
}

// stacks returns the report's stacks, most ticks first: those that
// became equal once named counted together, each where it was first met.
func (b *builder) stacks() []stackEntry {
	order := b.stk.mergeEqual(b.stk.order())
	stk := make([]stackEntry, 0, len(order))
	for _, j := range order {
		e := b.stk.at(j)
		stk = append(stk, stackEntry{pid: e.pid, tid: e.tid, frames: b.stk.framesOf(e), kernel: int(e.kernel), truncated: e.truncated, n: e.n})
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
	return stk
}

// cells sums the entries into the report's cells. A cell is one Key
// (names are interned: one number, one name). A result is one (module,
// symbol) (interned as named), so a cell is one (thread, result). The
// cells are made on two goroutines, each those of half the threads (by a
// hash of the thread), in two passes and no map of cells: the first finds
// the runs of entries of one thread (entries come thread by thread, a
// thread in several runs: its states, user and kernel, the readers), the
// second takes the runs thread after thread and finds a result's cell in
// a table by result, stamped with the thread (no map lookup per distinct
// (thread, address): over a many-process report's hundreds of thousands
// of entries those lookups were most of the cells' time). The order of
// the cells is the sections' (cellOrder), not this one.
func (b *builder) cells(resOf []int32) {
	var parts [2][]cell
	var partThreads [2][]cell // each part's threads (pid, tid), once
	var wg sync.WaitGroup
	for half := range uint64(2) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			parts[half], partThreads[half] = makeCells(b.all, b.nent, half, resOf, b.in.resMod, b.in.resSym)
		}()
	}
	wg.Wait()
	b.rep.cells = append(parts[0], parts[1]...)
	b.rep.threads = append(partThreads[0], partThreads[1]...)
}
