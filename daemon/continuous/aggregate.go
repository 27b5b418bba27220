package continuous

import (
	"encoding/binary"
	"os"

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
	kind   uint8 // 0 module, 1 kernel, 2 process
	module string
	addr   uint64
	pid    uint32
}

type location struct {
	key locKey
	loc a2n.Loc
}

type pidPC struct {
	pid uint32
	pc  uint64
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
	byPC     map[pidPC]int32
	stacks   map[string]*stackCount
	order    []*stackCount // in first-seen order (stable output)
	procs    map[uint32]*procInfo
	samples  int64  // samples counted
	dropped  int64  // samples past the limits
	key      []byte // scratch
}

func newInterval(startNS uint64) *interval {
	return &interval{startNS: startNS, locIndex: map[locKey]int32{}, byPC: map[pidPC]int32{}, stacks: map[string]*stackCount{}, procs: map[uint32]*procInfo{}}
}

// aggregator applies the side-band records to the name tables and counts
// stacks; it runs on one goroutine.
type aggregator struct {
	res       *a2n.Resolver
	cacheDir  string
	limits    Limits
	idle      bool            // keep the idle task's samples (pid 0)
	described map[uint32]bool // pids read from /proc after a sample of an unknown process
	cur       *interval
	idleCount int64
	infos     *procInfos
	modules   map[string]bool // modules named since the tables started
	rec       trace.Record
}

func newAggregator(cacheDir string, limits Limits, idle bool, startNS uint64) *aggregator {
	a := &aggregator{cacheDir: cacheDir, limits: limits.withDefaults(), idle: idle, infos: newProcInfos()}
	a.reset()
	a.cur = newInterval(startNS)
	return a
}

// reset starts new name tables from the kernel's symbols and /proc (at
// start, and now and then so processes gone and modules replaced on disk
// do not accumulate).
func (a *aggregator) reset() {
	ks, _ := os.ReadFile("/proc/kallsyms")
	a.res = a2n.NewCached(ks, a.cacheDir)
	a.described = map[uint32]bool{}
	a.modules = map[string]bool{}
	_ = procscan.Scan(0, func(minor uint32, fields []uint64, str string) {
		a.applyMTE(minor, fields, str)
	})
}

func (a *aggregator) applyMTE(minor uint32, fields []uint64, str string) {
	a.rec = trace.Record{Major: trace.MajorMTE, Minor: minor, Fixed: append(a.rec.Fixed[:0], fields...), Str: str}
	a.res.Apply(&a.rec)
}

func (a *aggregator) handle(e *event) {
	switch e.kind {
	case evMTE:
		a.applyMTE(e.minor, e.fields[:e.nf], e.str)
		if e.minor == trace.MTEExit && e.nf >= 2 && e.fields[0] == e.fields[1] {
			a.infos.forget(uint32(e.fields[0]))
		}
	case evSample:
		a.sample(e)
	}
}

// sample counts one sample in the current interval.
func (a *aggregator) sample(e *event) {
	if e.pid == 0 && e.tid == 0 && !a.idle {
		a.idleCount++
		return
	}
	iv := a.cur
	if e.pid != 0 && a.res.Process(e.pid) == nil && !a.described[e.pid] {
		// Its records were not seen (lost, or before the scan): /proc.
		a.described[e.pid] = true
		_ = procscan.Describe(int(e.pid), e.t, func(minor uint32, fields []uint64, str string) {
			a.applyMTE(minor, fields, str)
		})
	}
	if _, ok := iv.procs[e.pid]; !ok && len(iv.procs) < a.limits.Stacks {
		iv.procs[e.pid] = a.infos.get(e.pid)
	}
	key := binary.LittleEndian.AppendUint32(iv.key[:0], e.pid)
	key = binary.LittleEndian.AppendUint32(key, e.tid)
	locs := make([]int32, 0, len(e.pcs))
	for i, pc := range e.pcs {
		kernel := i < e.kernel
		if i != 0 && i != e.kernel && pc > 0 {
			// A return address: name the call instruction before it
			// (the first user frame is where the thread entered the
			// kernel, not a return address).
			pc--
		}
		idx, ok := a.location(iv, e.pid, pc, kernel)
		if !ok {
			iv.dropped++
			return
		}
		locs = append(locs, idx)
		key = binary.LittleEndian.AppendUint32(key, uint32(idx))
	}
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
	sc := &stackCount{pid: e.pid, tid: e.tid, locs: locs, count: 1}
	iv.stacks[string(key)] = sc
	iv.order = append(iv.order, sc)
	iv.samples++
}

// location is the index of pc's location in the interval (ok false past
// the limit).
func (a *aggregator) location(iv *interval, pid uint32, pc uint64, kernel bool) (int32, bool) {
	kpid := pid
	if kernel {
		kpid = 0 // kernel addresses mean the same in every process
	}
	if idx, ok := iv.byPC[pidPC{kpid, pc | boolBit(kernel)}]; ok {
		return idx, true
	}
	var l a2n.Loc
	var k locKey
	if kernel {
		l = a.res.LocateKernel(pc)
		k = locKey{kind: 1, addr: pc}
	} else {
		l = a.res.Locate(pid, pc, false)
		if m := l.Module(); m != "" {
			k = locKey{kind: 0, module: m, addr: l.FileOffset()}
			if !a.modules[m] {
				a.modules[m] = true
				a.res.Cache.Prefetch(m)
			}
		} else {
			k = locKey{kind: 2, addr: pc, pid: pid}
		}
	}
	idx, ok := iv.locIndex[k]
	if !ok {
		if len(iv.locs) >= a.limits.Locations {
			return 0, false
		}
		idx = int32(len(iv.locs))
		iv.locs = append(iv.locs, location{key: k, loc: l})
		iv.locIndex[k] = idx
	}
	if len(iv.byPC) < 4*a.limits.Locations {
		iv.byPC[pidPC{kpid, pc | boolBit(kernel)}] = idx
	}
	return idx, true
}

// boolBit marks kernel addresses in the per-pc cache key (user addresses
// never have the top bit set; kernel ones always do, so this only keeps
// the two apart should either rule change).
func boolBit(kernel bool) uint64 {
	if kernel {
		return 1 << 63
	}
	return 0
}

// rotate ends the current interval and starts the next.
func (a *aggregator) rotate(nowNS uint64) *interval {
	iv := a.cur
	a.cur = newInterval(nowNS)
	return iv
}
