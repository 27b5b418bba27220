package continuous

import (
	"encoding/binary"
	"slices"

	"perfinsp/analysis/a2n"
	"perfinsp/format/trace"
	"perfinsp/internal/procscan"
)

// Limits bound one interval's tables: samples past them are counted as
// dropped, not kept.
type Limits struct {
	Stacks    int // distinct (thread, stack) pairs (default 20000)
	Locations int // distinct code locations (default 50000)
}

func (l Limits) withDefaults() Limits {
	if l.Stacks <= 0 {
		l.Stacks = 20000
	}
	if l.Locations <= 0 {
		l.Locations = 50000
	}
	return l
}

// locKey identifies a location: a module's file offset, a kernel address,
// or a process's address named without a module (JIT, anonymous memory).
type locKey struct {
	kind   uint8 // locModule, locKernel, locProcess
	module string
	addr   uint64
	pid    uint32
}

const (
	locModule uint8 = iota
	locKernel
	locProcess
)

type location struct {
	key locKey
	fn  frameName // the name of a process's address (locProcess): final at the sample
	// vdso is where Locate found a [vdso] address (named from the
	// kernel's vDSO image by the resolver).
	vdso *a2n.Loc
}

// pcKey caches a program counter's location within an interval: the
// process (0 for kernel addresses), its exec generation, the address.
type pcKey struct {
	pid, gen uint32
	pc       uint64
}

// stackCount is the samples of one thread with one stack.
type stackCount struct {
	pid, tid uint32
	locs     []int32 // indices into interval.locs, leaf first
	count    int64
}

// interval is one period's aggregate.
type interval struct {
	startNS  uint64 // wall clock, Unix ns
	locIndex map[locKey]int32
	locs     []location
	byPC     map[pcKey]int32
	// stacks is keyed by the sample as it came: pid, tid, the process's
	// exec generation, the kernel frame count and the program counters.
	// A stack seen before costs one lookup; a new one is located frame
	// by frame.
	stacks  map[string]*stackCount
	order   []*stackCount // in first-seen order (stable output)
	procs   map[uint32]*procInfo
	samples int64 // samples counted
	dropped int64 // samples past the limits
	// Off-CPU time (Config.OffCPU): ns per (thread, stack) of its waits,
	// keyed as stacks; their total, and the ns past the limits.
	offStacks         map[string]*stackCount
	offOrder          []*stackCount
	offNS, offDropped int64
	// Interrupt time (Config.Interrupts): ns per (thread, handler), in
	// first-seen order; their total, and the ns past the limits.
	intr                map[intrKey]*stackCount
	intrOrder           []*stackCount
	intrNS, intrDropped int64
	key                 []byte // scratch
	locsBuf             []int32
	// names are the names of the threads counted in the interval (by
	// threadKey): each thread's at its first count, and at its exit if it
	// exits in the interval (the name tables forget it then); a thread
	// still alive at the end is named as it is then.
	names map[uint64]string
}

func threadKey(pid, tid uint32) uint64 { return uint64(pid)<<32 | uint64(tid) }

// counted notes that thread tid of pid has a count in the interval.
func (a *aggregator) counted(iv *interval, pid, tid uint32) {
	if _, ok := iv.names[threadKey(pid, tid)]; !ok {
		iv.names[threadKey(pid, tid)] = a.res.ThreadName(pid, tid)
	}
}

func newInterval(startNS uint64) *interval {
	return &interval{startNS: startNS, locIndex: map[locKey]int32{}, byPC: map[pcKey]int32{}, stacks: map[string]*stackCount{}, procs: map[uint32]*procInfo{},
		offStacks: map[string]*stackCount{}, intr: map[intrKey]*stackCount{}, names: map[uint64]string{}}
}

// aggregator applies the side-band records to the name tables and counts
// stacks; it runs on one goroutine.
type aggregator struct {
	res    *a2n.Resolver
	limits Limits
	idle   bool // keep the idle task's samples (pid 0)
	// known: the processes whose name, threads and mappings the tables
	// hold, from a read of /proc (at the first record that needs them:
	// a sample, interrupt time, a fork) or from their records since
	// their start (the fork of a known process, an exec); tried: those
	// read from /proc, or tried (gone).
	known, tried map[uint32]bool
	cur          *interval
	idleCount    int64
	infos        *procInfos
	gens         map[uint32]uint32 // exec generation of the processes that exec'd
	exited       int               // processes that exited since the tables started
	off          *offCPU           // the threads' waits (nil: off-CPU time not counted)
	spare        *interval         // an ended interval's tables, emptied (recycle)
	rec          trace.Record
}

func newAggregator(limits Limits, idle, offCPU bool, startNS uint64) *aggregator {
	a := &aggregator{limits: limits.withDefaults(), idle: idle, infos: newProcInfos()}
	if offCPU {
		a.off = newOffCPU()
	}
	a.reset()
	a.cur = newInterval(startNS)
	return a
}

// reset starts new process tables (at start, and now and then so
// processes gone do not accumulate): each process is read from /proc when
// a record first needs it (know), not all at once. The resolver follows
// processes and their mappings only: modules and the kernel are named by
// the namer at the end of each interval.
func (a *aggregator) reset() {
	a.res = a2n.New(nil)
	a.known, a.tried = map[uint32]bool{}, map[uint32]bool{}
	a.exited = 0
	a.gens = map[uint32]uint32{}
}

// know makes the tables hold pid's process (its name, threads and
// mappings), reading it from /proc (stamped t) unless they do. A process
// that cannot be read (gone) is not tried again.
func (a *aggregator) know(pid uint32, t uint64) {
	if pid == 0 || a.known[pid] || a.tried[pid] {
		return
	}
	a.tried[pid] = true
	a.known[pid] = procscan.Describe(int(pid), t, func(minor uint32, fields []uint64, str string) {
		a.applyMTE(minor, fields, str)
	}) == nil
}

func (a *aggregator) applyMTE(minor uint32, fields []uint64, str string) {
	a.rec = trace.Record{Major: trace.MajorMTE, Minor: minor, Fixed: append(a.rec.Fixed[:0], fields...), Str: str}
	a.res.Apply(&a.rec)
}

func (a *aggregator) handle(e *event, pcs []uint64) {
	switch e.kind {
	case evMTE:
		f := e.fields[:e.nf]
		fork := e.minor == trace.MTEFork && len(f) >= 5 && f[4]&trace.ForkThread == 0 && f[0] != f[2]
		if fork {
			// The child starts with its parent's mappings: the
			// parent's are read first if they are not known.
			a.know(uint32(f[0]), e.t)
			a.known[uint32(f[2])] = a.known[uint32(f[0])]
		}
		a.applyMTE(e.minor, f, e.str)
		if e.minor == trace.MTEExit && len(f) >= 2 && a.off != nil {
			a.off.threadExited(uint32(f[1]), e.t)
		}
		if e.minor == trace.MTEExit && len(f) >= 2 {
			a.threadExited(uint32(f[0]), uint32(f[1]))
		}
		switch {
		case e.minor == trace.MTEExit && len(f) >= 2 && f[0] == f[1]:
			a.infos.forget(uint32(f[0]))
			delete(a.gens, uint32(f[0]))
			delete(a.known, uint32(f[0]))
			delete(a.tried, uint32(f[0]))
			a.exited++
		case e.minor == trace.MTEExec && len(f) >= 1:
			// The same pid, another program: its addresses mean
			// other things from here on.
			a.gens[uint32(f[0])]++
			a.infos.forget(uint32(f[0]))
			a.known[uint32(f[0])] = true // its mappings from here on are in its records
		}
	case evSample:
		a.sample(e, pcs)
	case evSwitch:
		if a.off != nil {
			a.switched(e)
		}
	case evWaitStack:
		if a.off != nil {
			a.waitStack(e, pcs)
		}
	case evIntr:
		a.interrupt(e)
	}
}

// threadExited forgets the name of thread tid of pid: a process that makes
// and ends threads all the time (a pool, a test of thread creation) would
// otherwise grow its table by one name a thread until the tables start
// anew. Its samples were counted before (records apply in time order) and
// hold its name.
func (a *aggregator) threadExited(pid, tid uint32) {
	if p := a.res.Process(pid); p != nil {
		if _, ok := a.cur.names[threadKey(pid, tid)]; ok {
			a.cur.names[threadKey(pid, tid)] = a.res.ThreadName(pid, tid)
		}
		delete(p.Threads, tid)
	}
}

// sample counts one sample in the current interval.
func (a *aggregator) sample(e *event, pcs []uint64) {
	if e.pid == 0 && e.tid == 0 && !a.idle {
		a.idleCount++
		return
	}
	iv := a.cur
	gen := a.gens[e.pid]
	key := stackKey(iv.key[:0], e.pid, e.tid, gen, e.kernel, pcs)
	iv.key = key
	if sc, ok := iv.stacks[string(key)]; ok {
		sc.count++
		iv.samples++
		return
	}
	if len(iv.stacks) >= a.limits.Stacks {
		iv.dropped++
		return
	}
	locs, ok := a.locateStack(iv, e.pid, gen, e.t, int(e.kernel), pcs)
	if !ok {
		iv.dropped++
		return
	}
	a.counted(iv, e.pid, e.tid)
	sc := &stackCount{pid: e.pid, tid: e.tid, locs: locs, count: 1}
	iv.stacks[string(key)] = sc
	iv.order = append(iv.order, sc)
	iv.samples++
}

// stackKey appends to key what tells one thread's stack from another:
// pid, tid, the process's exec generation, the kernel frame count and the
// program counters.
func stackKey(key []byte, pid, tid, gen uint32, kernel uint16, pcs []uint64) []byte {
	key = binary.LittleEndian.AppendUint32(key, pid)
	key = binary.LittleEndian.AppendUint32(key, tid)
	key = binary.LittleEndian.AppendUint32(key, gen)
	key = binary.LittleEndian.AppendUint16(key, kernel)
	for _, pc := range pcs {
		key = binary.LittleEndian.AppendUint64(key, pc)
	}
	return key
}

// locateStack locates a stack of pid seen at t (its first kernel frames
// kernel addresses) in iv: its locations, leaf first (ok false past the
// limits).
func (a *aggregator) locateStack(iv *interval, pid, gen uint32, t uint64, kernel int, pcs []uint64) ([]int32, bool) {
	a.know(pid, t)
	if _, ok := iv.procs[pid]; !ok && len(iv.procs) < a.limits.Stacks {
		iv.procs[pid] = a.infos.get(pid)
	}
	locs := iv.locsBuf[:0]
	defer func() { iv.locsBuf = locs }()
	for i, pc := range pcs {
		k := i < kernel
		if i != 0 && i != kernel && pc > 0 {
			// A return address: name the call instruction before it
			// (the first user frame is where the thread entered the
			// kernel, not a return address).
			pc--
		}
		idx, ok := a.location(iv, pid, gen, pc, k)
		if !ok {
			return nil, false
		}
		locs = append(locs, idx)
	}
	return slices.Clone(locs), true
}

// location is the index of pc's location in the interval (ok false past
// the limit).
func (a *aggregator) location(iv *interval, pid, gen uint32, pc uint64, kernel bool) (int32, bool) {
	pk := pcKey{pid, gen, pc}
	if kernel {
		pk = pcKey{pc: pc} // kernel addresses mean the same in every process
	}
	if idx, ok := iv.byPC[pk]; ok {
		return idx, true
	}
	var loc location
	if kernel {
		loc.key = locKey{kind: locKernel, addr: pc}
	} else {
		l := a.res.Locate(pid, pc, false)
		switch m := l.Module(); m {
		case "":
			res := l.Final()
			loc.key = locKey{kind: locProcess, addr: pc, pid: pid}
			loc.fn = frameName{module: res.Module, symbol: res.Symbol}
		case "[vdso]":
			loc.key = locKey{kind: locModule, module: m, addr: l.FileOffset()}
			loc.vdso = &l
		default:
			loc.key = locKey{kind: locModule, module: m, addr: l.FileOffset()}
		}
	}
	idx, ok := iv.locIndex[loc.key]
	if !ok {
		if len(iv.locs) >= a.limits.Locations {
			return 0, false
		}
		idx = int32(len(iv.locs))
		iv.locs = append(iv.locs, loc)
		iv.locIndex[loc.key] = idx
	}
	if len(iv.byPC) < 4*a.limits.Locations {
		iv.byPC[pk] = idx
	}
	return idx, true
}

// rotate ends the current interval and starts the next (in the tables of
// the interval recycled last, if any).
func (a *aggregator) rotate(nowNS uint64) *interval {
	iv := a.cur
	if a.spare != nil {
		a.cur, a.spare = a.spare, nil
		a.cur.startNS = nowNS
	} else {
		a.cur = newInterval(nowNS)
	}
	return iv
}

// recycle takes back iv, an interval rotate ended whose request is built
// (nothing refers to its tables any more): emptied, its maps and slices
// keep their memory for the next interval, which would otherwise grow
// them anew from empty, sample after sample.
func (a *aggregator) recycle(iv *interval) {
	iv.reset()
	a.spare = iv
}

// reset empties iv for another interval, keeping its memory.
func (iv *interval) reset() {
	clear(iv.locIndex)
	clear(iv.byPC)
	clear(iv.stacks)
	clear(iv.procs)
	clear(iv.offStacks)
	clear(iv.intr)
	clear(iv.names)
	clear(iv.locs)
	clear(iv.order)
	clear(iv.offOrder)
	clear(iv.intrOrder)
	iv.locs, iv.order, iv.offOrder, iv.intrOrder = iv.locs[:0], iv.order[:0], iv.offOrder[:0], iv.intrOrder[:0]
	iv.samples, iv.dropped = 0, 0
	iv.offNS, iv.offDropped, iv.intrNS, iv.intrDropped = 0, 0, 0, 0
}
