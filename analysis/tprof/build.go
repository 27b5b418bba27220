package tprof

import (
	"sort"
	"sync"

	"perfinsp/analysis/a2n"
	"perfinsp/format/nrm2"
	"perfinsp/format/trace"
)

// builder holds what BuildFiltered keeps while it reads a trace: the
// names met (an interner), the Locs waiting to be named, the tick counters
// and the call stacks. Its methods are the steps of a report's making:
// count (the records, on every CPU at once or by the one reader), then
// endNaming, stacks and cells.
//
// Naming is at once or deferred. With onRecord (which needs each name at
// once) an address is named when it is met. Without it, an address gets a
// Loc (the mapping it was in at its time), the modules the Locs need load
// in the background (a2n Prefetch) while the trace is read, and the Locs
// are named beside the reading (nameLocs); counters and stacks hold Loc
// indexes until the end.
type builder struct {
	f        *nrm2.File
	r        *a2n.Resolver
	rep      *Report
	filt     *Filter
	onRecord func(rec *trace.Record, res *a2n.Result)
	deferred bool
	java     bool // JProf Java stacks may name interpreter ticks (a2n.JavaTick)
	// keepAddrs: the report keeps the ticks by address (BuildWithAddresses).
	keepAddrs bool
	locStacks []locStack

	// in interns the names (results); in deferred naming only nameLocs
	// writes it, on its own goroutine, until endNaming.
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

	// Counters are kept in blocks (entryBlock); naming at once keeps each
	// entry's offset from its symbol in offs.
	all  [][]entry
	offs [][]uint64
	nent int32
	// Naming at once: each (thread, address) gets one counter the first
	// time it is seen, found again with one map lookup (tickKey). A
	// process's counters are keyed by its slot, a number given anew each
	// time its mappings change (the next tick at an address is located
	// again; the older counters are kept).
	tickIdx map[tickKey]int32
	pidSlot map[uint32]uint64
	slots   uint64
	// The slot of the last tick's process. haveLast false means none:
	// every pid value is a real one (the kernel reports -1 for a task
	// whose pid is gone, e.g. a tick in an exiting thread).
	lastPid  uint32
	lastSlot uint64
	haveLast bool

	// Deferred naming counts ticks without a lookup per tick (ticks.go):
	// the addresses of a thread's ticks are kept until its process's
	// mappings change or the trace ends, then counted, each distinct one
	// located as of its time (locOf). nil: counted on every CPU at once,
	// or naming at once.
	tc *tickCounter
	// In deferred naming an address's Loc depends only on its process's
	// mappings (its slot) and, for kernel addresses, not even on that:
	// threads of one process share it, every process shares the kernel's.
	// One table per slot (kernel: key 1<<63), keyed by the address alone
	// (Go's fast path for one-word keys; the two-word key hashed the
	// whole struct: 14 % of a flat report's CPU); a slot's table is
	// dropped when its process's mappings change (every tick of the old
	// state has been counted by then).
	locOf      map[uint64]map[uint64]int32
	lastLocKey uint64
	lastLocs   map[uint64]int32
	// The tables of a process's state (its Locs, PCs and raw stacks) are
	// dropped when the state ends, and a many-process trace ends
	// thousands: they are emptied and used again (grown from empty, new
	// tables were a third of a many-process stacks report's CPU).
	pcPool  tablePool[uint64]
	rawPool tablePool[string]

	// Stacks: each PC resolved once per process (as ticks are), frames as
	// indexes into results (deferred: Locs), identical stacks counted
	// together in stk (both readers'). A stack seen before in a process (the same thread, flags
	// and PCs: the record's bytes) finds its entry with one lookup of
	// those bytes (rawStacks); those tables are dropped with the PC caches
	// when mappings change. A PC is cached as a kernel or a user frame
	// ([1] or [0]): the name of an address must not depend on which it
	// was first met as.
	pcCache   map[uint32]*[2]map[uint64]int32
	rawStacks map[uint32]map[string]int32 // per process: raw stack -> index into stk
	leaf      *leafFrames                 // the callers frame-pointer stacks lose (leafframe.go)
	stk       stackSet
	frameBuf  []int32
	rawBuf    []byte
}

// tickKey is a counter's key in naming at once: the address, and the
// thread with its process's slot (and whether the tick was in the kernel).
type tickKey struct {
	ip uint64
	w  uint64 // kernel<<63 | slot<<32 | tid
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
// goroutine started (deferred naming).
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
		f: f, r: r, rep: rep, filt: filt, onRecord: onRecord, deferred: onRecord == nil,
		in:        &interner{nameNum: map[string]int32{}, intern: map[uint64]int32{}},
		pidSlot:   map[uint32]uint64{},
		locOf:     map[uint64]map[uint64]int32{},
		pcCache:   map[uint32]*[2]map[uint64]int32{},
		stk:       newStackSet(),
		rawStacks: map[uint32]map[string]int32{},
		namedAll:  make(chan struct{}),
		leaf:      newLeafFrames(r),
		java:      r.HasJavaStacks(),
	}
	b.addLocFn = b.addLoc
	b.locSet = &locSet{newMod: func(m string) {
		if m != "[vdso]" {
			r.Cache.Prefetch(m)
		}
	}}
	if b.deferred {
		b.toName = make(chan []a2n.Loc, 1024)
		go b.nameLocs(b.toName, b.in)
		b.tc = newTickCounter(b.countLoc)
	} else {
		// Sized for a share of the ticks the file can hold (a tick is a
		// 32-byte record; real traces have a distinct (thread, address)
		// per five ticks or so): a map that grows from empty moves each
		// entry several times, which cost more than a flat report's
		// lookups.
		var traceBytes int
		for _, c := range f.Chunks {
			if c.Kind == nrm2.ChunkTrace {
				traceBytes += len(c.Data)
			}
		}
		b.tickIdx = make(map[tickKey]int32, min(traceBytes/32/8, 1<<18))
	}
	return b
}

// build makes the report: the ticks and stacks counted, the names made,
// the cells summed.
func (b *builder) build() *Report {
	var err error
	defer b.leaf.close()
	if b.deferred && b.filt == nil && !b.java && countParallel(b) {
		b.tc = nil // counted
	} else {
		err = b.f.Records(b.record)
	}
	if b.tc != nil {
		b.tc.flushAll()
	}
	resOf := b.endNaming()
	rep := b.rep
	rep.stk, rep.res, rep.names = b.stacks(), b.in.results, b.in.names
	b.cells(resOf)
	if b.keepAddrs && b.deferred {
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

// endNaming waits for every Loc to be named (in the order they were met,
// which gives the names the order naming at once gives) and makes the
// stacks' frames names. It returns each Loc's name (nil: naming at once).
func (b *builder) endNaming() []int32 {
	if !b.deferred {
		return nil
	}
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

// resolve returns the index of addr's name (deferred: of its Loc) and
// its offset from the symbol (only known, and only needed, at once).
func (b *builder) resolve(pid uint32, addr uint64, kernel bool) (int32, uint64) {
	if !b.deferred {
		res := b.r.Resolve(pid, addr, kernel)
		return b.in.result(res), res.Offset
	}
	return b.locSet.index(b.r.Locate(pid, addr, kernel), b.addLocFn), 0
}

// locate is resolve's index alone.
func (b *builder) locate(pid uint32, addr uint64, kernel bool) int32 {
	idx, _ := b.resolve(pid, addr, kernel)
	return idx
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

// newEntry adds an entry of no ticks and returns it.
func (b *builder) newEntry(pid, tid uint32, res int32, off uint64) int32 {
	if b.nent%entryBlock == 0 {
		b.all = append(b.all, make([]entry, 0, entryBlock))
		if !b.deferred {
			b.offs = append(b.offs, make([]uint64, 0, entryBlock))
		}
	}
	b.all[len(b.all)-1] = append(b.all[len(b.all)-1], entry{pid: pid, tid: tid, res: res})
	if !b.deferred {
		b.offs[len(b.offs)-1] = append(b.offs[len(b.offs)-1], off)
	}
	b.nent++
	return b.nent - 1
}

func (b *builder) entry(i int32) *entry { return &b.all[i/entryBlock][i%entryBlock] }

// addEntry adds n ticks of (pid, tid) at res.
func (b *builder) addEntry(pid, tid uint32, res int32, n uint64) {
	for n > 0 {
		m := min(n, entryMax)
		i := b.newEntry(pid, tid, res, 0)
		b.entry(i).n = uint32(m)
		n -= m
	}
}

// slotOf is pid's slot (a new one after its mappings changed).
func (b *builder) slotOf(pid uint32) uint64 {
	s, ok := b.pidSlot[pid]
	if !ok {
		b.slots++
		s = b.slots & (1<<31 - 1) // wraps only past two billion mapping changes
		b.pidSlot[pid] = s
	}
	return s
}

// locTable is the table of Locs of a slot (kernel: 1<<63).
func (b *builder) locTable(key uint64) map[uint64]int32 {
	if key == b.lastLocKey && b.lastLocs != nil {
		return b.lastLocs
	}
	t := b.locOf[key]
	if t == nil {
		t = b.pcPool.get()
		b.locOf[key] = t
	}
	b.lastLocKey, b.lastLocs = key, t
	return t
}

// countLoc is the tick counter's output in deferred naming: n ticks of a
// thread at ip, located as of now.
func (b *builder) countLoc(t *tickThread, kernel bool, ip, n uint64) {
	pid, tid := t.pid, t.tid
	lk := uint64(1) << 63
	if !kernel {
		lk = b.slotOf(pid)
	}
	lt := b.locTable(lk)
	idx, known := lt[ip]
	if !known {
		idx = b.locate(pid, ip, kernel)
		lt[ip] = idx
	}
	b.addEntry(pid, tid, idx, n)
}

// pcIndex is the index of a stack's PC, resolved once per process.
func (b *builder) pcIndex(pid uint32, pc uint64, kernel bool) int32 {
	pms := b.pcCache[pid]
	if pms == nil {
		pms = &[2]map[uint64]int32{}
		b.pcCache[pid] = pms
	}
	k := 0
	if kernel {
		k = 1
	}
	pm := pms[k]
	if pm == nil {
		pm = b.pcPool.get()
		pms[k] = pm
	}
	if idx, ok := pm[pc]; ok {
		return idx
	}
	idx := b.locate(pid, pc, kernel)
	pm[pc] = idx
	return idx
}

// record takes one record of the one reader, in time order.
func (b *builder) record(rec *trace.Record) error {
	switch rec.Major {
	case trace.MajorMTE, trace.MajorJITLoad:
		b.mappings(rec)
	case trace.MajorTprof:
		b.tick(rec)
	case trace.MajorUnwind:
		if b.onRecord != nil {
			b.onRecord(rec, nil)
		}
		if rec.Minor == trace.UnwindTick { // not a wait's stack (UNWIND_SWITCH)
			b.unwind(rec)
		}
	default:
		if rec.Major == trace.MajorSys && rec.Minor == trace.SysEvent {
			b.rep.Event, b.rep.EventPeriod = rec.Str, rec.Field(2)
		}
		if b.onRecord != nil {
			b.onRecord(rec, nil)
		}
	}
	return nil
}

// mappings applies an MTE or JIT record; one that changes its process's
// mappings ends the process's state.
func (b *builder) mappings(rec *trace.Record) {
	pid, changes := isChange(rec)
	if changes && b.tc != nil {
		// The pid's ticks so far are located in the state they were in,
		// before this record changes it.
		b.tc.flushPid(pid)
	}
	b.r.Apply(rec)
	if changes {
		if rec.Major == trace.MajorMTE && rec.Minor == trace.MTEFork && b.filt != nil && b.filt.Children && b.filt.Pids[uint32(rec.Field(0))] {
			b.filt.Pids[pid] = true // a process (or thread) the selection created
		}
		b.endState(pid)
	}
	if b.onRecord != nil {
		b.onRecord(rec, nil)
	}
}

// endState drops the tables of pid's state (its mappings changed).
func (b *builder) endState(pid uint32) {
	if s, ok := b.pidSlot[pid]; ok {
		b.pcPool.put(b.locOf[s])
		delete(b.locOf, s)
		if b.lastLocKey == s {
			b.lastLocs = nil
		}
	}
	delete(b.pidSlot, pid) // the next tick takes a new slot
	if pms := b.pcCache[pid]; pms != nil {
		b.pcPool.put(pms[0])
		b.pcPool.put(pms[1])
	}
	delete(b.pcCache, pid)
	b.rawPool.put(b.rawStacks[pid])
	delete(b.rawStacks, pid)
	if pid == b.lastPid {
		b.haveLast = false
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

// tick counts one TPROF_TICK record.
func (b *builder) tick(rec *trace.Record) {
	pid, tid, ip := uint32(rec.Field(0)), uint32(rec.Field(1)), rec.Field(2)
	if !b.selected(pid, tid) {
		b.rep.Filtered++
		if b.onRecord != nil {
			b.onRecord(rec, nil)
		}
		return
	}
	kernel := rec.Field(3)&trace.TprofKernel != 0
	if b.java && !kernel {
		ip = b.r.JavaTick(pid, tid, rec.Time, ip) // the interpreter's tick at its Java method
	}
	if b.tc != nil {
		t, isNew := b.tc.thread(rec.CPU, pid, tid, 0)
		if isNew {
			b.nameThread(pid, tid)
			b.prefetch(pid, ip, kernel)
		} else if b.rep.Total&1023 == 0 {
			b.prefetch(pid, ip, kernel)
		}
		b.tc.add(t, kernel, ip)
	} else {
		b.tickAtOnce(rec, pid, tid, ip, kernel)
	}
	b.rep.Total++
	if b.rep.First == 0 || rec.Time < b.rep.First {
		b.rep.First = rec.Time
	}
	if rec.Time > b.rep.Last {
		b.rep.Last = rec.Time
	}
}

// tickAtOnce counts a tick in naming at once: its (thread, address)'s
// counter, named when new.
func (b *builder) tickAtOnce(rec *trace.Record, pid, tid uint32, ip uint64, kernel bool) {
	if pid != b.lastPid || !b.haveLast {
		b.lastPid, b.lastSlot, b.haveLast = pid, b.slotOf(pid), true
	}
	k := tickKey{ip: ip, w: b.lastSlot<<32 | uint64(tid)}
	if kernel {
		k.w |= 1 << 63
	}
	i, ok := b.tickIdx[k]
	if !ok {
		idx, off := b.resolve(pid, ip, kernel)
		i = b.newEntry(pid, tid, idx, off)
		b.tickIdx[k] = i
		b.nameThread(pid, tid)
	}
	e := b.entry(i)
	if uint64(e.n) == entryMax { // full: the next ticks in a new one
		i = b.newEntry(pid, tid, e.res, b.offs[i/entryBlock][i%entryBlock])
		b.tickIdx[k] = i
		e = b.entry(i)
	}
	e.n++
	if b.onRecord != nil {
		res := b.in.results[e.res]
		res.Offset = b.offs[i/entryBlock][i%entryBlock]
		b.onRecord(rec, &res)
	}
}

// unwind counts one UNWIND record's stack: one more tick of a stack met
// before in its process's state (by the record's bytes), or its PCs
// resolved and the stack found by its frames, or kept as a new one.
func (b *builder) unwind(rec *trace.Record) {
	pid, tid, flags := uint32(rec.Field(0)), uint32(rec.Field(1)), rec.Field(2)
	if !b.selected(pid, tid) {
		return
	}
	n := len(rec.Str) / 8
	if n == 0 {
		return
	}
	rs := b.rawStacks[pid]
	if rs == nil {
		rs = b.rawPool.get()
		b.rawStacks[pid] = rs
	}
	b.rawBuf = append(b.rawBuf[:0], byte(tid), byte(tid>>8), byte(tid>>16), byte(tid>>24), byte(flags), byte(flags>>8), byte(flags>>16), byte(flags>>24))
	b.rawBuf = append(b.rawBuf, rec.Str[:8*n]...)
	if i, ok := rs[string(b.rawBuf)]; ok {
		b.stackTick(i)
		return
	}
	nk := int(flags >> trace.UnwindKernShift)
	var lost uint64
	found := false
	if nk+1 < n {
		lost, found = b.leaf.missing(pid, le64(rec.Str[8*nk:]), le64(rec.Str[8*(nk+1):]), flags)
	}
	b.frameBuf = b.frameBuf[:0]
	for i := n - 1; i >= 0; i-- { // root first
		pc := le64(rec.Str[8*i:])
		if i > 0 && i != nk {
			pc-- // a return address: name the call, not what follows it
		}
		if i == nk && found {
			b.frameBuf = append(b.frameBuf, b.pcIndex(pid, lost, false)) // the caller the walk lost
		}
		b.frameBuf = append(b.frameBuf, b.pcIndex(pid, pc, i < nk))
	}
	if len(b.frameBuf) == 0 {
		return
	}
	i, _ := b.stk.find(pid, tid, flags&trace.UnwindTruncated != 0, b.frameBuf, uint16(min(nk, n)), 0, 0, int64(b.stk.n))
	rs[string(b.rawBuf)] = i
	b.stackTick(i)
}

// stackTick counts one more tick of stack i.
func (b *builder) stackTick(i int32) {
	e := b.stk.at(i)
	e.n++
	b.rep.StackTicks++
	if e.truncated {
		b.rep.TruncatedStacks++
	}
}

// stacks returns the report's stacks, most ticks first: in deferred
// naming, those that became equal once named counted together, each where
// it was first met.
func (b *builder) stacks() []stackEntry {
	order := b.stk.order()
	if b.deferred {
		order = b.stk.mergeEqual(order)
	}
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
