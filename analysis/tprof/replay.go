package tprof

import (
	"slices"
	"sync"

	"perfinsp/format/nrm2"
	"perfinsp/format/trace"
)

// counter is the counting of a report's ticks and stacks, the one way
// whoever reads the records: workers (tickWorker) count each thread's
// ticks and stacks per state of its process, and each state's counts and
// stacks are located into the builder when the state ends (its process's
// mappings are then those of the state). On every CPU at once
// (countParallel: a worker per CPU, the states' ends replayed from the MTE
// records after the reading) or by the one reader (countSerial: one
// worker, each state located as the reader meets its end).
type counter struct {
	b       *builder
	workers []*tickWorker
	// per worker, its runs and raw stacks gathered into groups so far
	gathered []gatherMark
	// the MTE records (step 1), in blocks, and per process the times its
	// mappings changed
	mte     [][]trace.Record
	changes map[uint32][]uint64
	// each thread's first tick, in time order (the threads are named
	// then), and which of firsts a thread's is
	firsts []firstTick
	seen   map[[2]uint32]int
	// the workers' runs of user counts and their raw stacks by (pid,
	// epoch), and their kernel runs (located beside the replay)
	groups     map[[2]uint32][]runRef
	rawGroups  map[[2]uint32][]runRef
	kernelRuns []runRef
	epochs     map[uint32]uint32 // each process's state during the replay
	pcs        [2]pcMemo         // the located PCs of the state located, user and kernel
	lastEvent  *trace.Record     // the last TPROF_EVENT_NAME record
}

// gatherMark is how many of a worker's runs and raw stacks are gathered.
type gatherMark struct{ runs, raws int32 }

func newCounter(b *builder) *counter {
	return &counter{b: b, changes: map[uint32][]uint64{}, seen: map[[2]uint32]int{},
		groups: map[[2]uint32][]runRef{}, rawGroups: map[[2]uint32][]runRef{}, epochs: map[uint32]uint32{}}
}

// firstTick is a thread's first tick: its time and the buffer it was in.
type firstTick struct {
	pid, tid uint32
	time     uint64
	seq      int
}

// countParallel counts the ticks of b's trace as above, if it can: it
// applies the MTE records to the resolver and fills the report's totals
// and names, the builder's counters and stacks. False: nothing was
// changed, the trace needs the one reader.
func countParallel(b *builder) bool {
	size := 0
	var bufs []nrm2.BufferStream
	for _, s := range b.f.BufferStreams() {
		for _, c := range s.Chunks {
			size += len(c.Data)
		}
		if s.Kind == nrm2.ChunkTrace {
			bufs = append(bufs, s)
		}
	}
	if size < parallelMin || len(bufs) < 2 {
		return false
	}
	p := newCounter(b)
	if err := p.readMTE(); err != nil || len(b.f.Damage()) > 0 {
		return false
	}
	mteBytes := 0
	for _, c := range b.f.Chunks {
		if c.Kind == nrm2.ChunkMTE {
			mteBytes += len(c.Data)
		}
	}
	b.progress.add(mteBytes)
	b.rep.parallel = true
	if !p.readBuffers(bufs) {
		b.rep.parallel = false
		return false
	}
	p.gatherTotals()
	p.gatherFirsts()
	p.gatherCounts()
	p.replay()
	p.event()
	return true
}

// readMTE is step 1: the MTE records, kept (they are few) for step 3, in
// blocks and their fields in blocks of their own (a slice grown by
// appends, each record's fields an allocation, measurably delays the
// workers' start on a many-process trace).
func (p *counter) readMTE() error {
	const mteBlock, fieldBlock = 1024, 8192
	var fields []uint64
	prev := uint64(0)
	return p.b.f.RecordsOf(nrm2.ChunkMTE, func(rec *trace.Record) error {
		if rec.Time < prev {
			return errSequential
		}
		prev = rec.Time
		if rec.Major == trace.MajorUnwind || rec.Major == trace.MajorTprof {
			return errSequential
		}
		if rec.Major == trace.MajorSys && rec.Minor == trace.SysTimeHigh {
			return nil
		}
		if pid, ok := isChange(rec); ok {
			p.changes[pid] = append(p.changes[pid], rec.Time)
		}
		if len(p.mte) == 0 || len(p.mte[len(p.mte)-1]) == mteBlock {
			p.mte = append(p.mte, make([]trace.Record, 0, mteBlock))
		}
		if cap(fields)-len(fields) < len(rec.Fixed) {
			fields = make([]uint64, 0, max(fieldBlock, len(rec.Fixed)))
		}
		n := len(fields)
		fields = append(fields, rec.Fixed...)
		c := *rec
		c.Fixed = fields[n:len(fields):len(fields)]
		p.mte[len(p.mte)-1] = append(p.mte[len(p.mte)-1], c)
		return nil
	})
}

// readBuffers is step 2: each CPU's ticks, a worker each. False: a
// worker met what needs the one reader.
func (p *counter) readBuffers(bufs []nrm2.BufferStream) bool {
	p.workers = make([]*tickWorker, len(bufs))
	errs := make([]error, len(bufs))
	var wg sync.WaitGroup
	for i, s := range bufs {
		p.workers[i] = newTickWorker(s.Seq, p.changes)
		p.workers[i].progress = p.b.progress
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := p.workers[i]
			if errs[i] = w.read(p.b.f, s); errs[i] == nil {
				w.tc.flushAll()
			}
		}()
	}
	wg.Wait()
	for _, e := range errs {
		if e != nil {
			return false
		}
	}
	return true
}

// gatherTotals adds the workers' totals to the report.
func (p *counter) gatherTotals() {
	rep := p.b.rep
	for _, w := range p.workers {
		rep.Total += w.total
		if w.total > 0 {
			if rep.First == 0 || w.firstT < rep.First {
				rep.First = w.firstT
			}
			rep.Last = max(rep.Last, w.lastT)
		}
	}
}

// gatherFirsts sorts the workers' threads' first ticks for the replay.
func (p *counter) gatherFirsts() {
	for _, w := range p.workers {
		for k, t := range w.first {
			if i, ok := p.seen[k]; ok {
				if ft := &p.firsts[i]; t < ft.time || t == ft.time && w.seq < ft.seq {
					ft.time, ft.seq = t, w.seq
				}
				continue
			}
			p.seen[k] = len(p.firsts)
			p.firsts = append(p.firsts, firstTick{k[0], k[1], t, w.seq})
		}
	}
	slices.SortFunc(p.firsts, func(a, b firstTick) int {
		if a.time != b.time {
			if a.time < b.time {
				return -1
			}
			return 1
		}
		return a.seq - b.seq
	})
}

// gatherCounts groups the workers' runs and raw stacks made since the
// last gathering by the state they belong to (kernel runs apart).
func (p *counter) gatherCounts() {
	if len(p.gathered) < len(p.workers) {
		p.gathered = append(p.gathered, make([]gatherMark, len(p.workers)-len(p.gathered))...)
	}
	nraws := 0
	for wi, w := range p.workers {
		g := &p.gathered[wi]
		for ri := int(g.runs); ri < len(w.runs); ri++ {
			run := &w.runs[ri]
			if run.kernel {
				p.kernelRuns = append(p.kernelRuns, runRef{int32(wi), int32(ri)})
				continue
			}
			k := [2]uint32{run.pid, run.epoch}
			p.groups[k] = append(p.groups[k], runRef{int32(wi), int32(ri)})
		}
		for i := g.raws; i < w.nraw; i++ {
			rs := w.raw(i)
			k := [2]uint32{rs.pid, rs.epoch}
			p.rawGroups[k] = append(p.rawGroups[k], runRef{int32(wi), i})
		}
		nraws += int(w.nraw - g.raws)
		g.runs, g.raws = int32(len(w.runs)), w.nraw
	}
	p.b.stk.reserve(nraws)
}

// replay is step 3: the MTE records applied in order, each state's
// counts and stacks located when it ends, the threads named at their
// first tick.
func (p *counter) replay() {
	side := startSide(p.b.r, p.workers, p.kernelRuns)
	for _, blk := range p.mte {
		for i := range blk {
			p.apply(&blk[i])
		}
	}
	p.nameUpTo(0, true)
	p.locateRest()
	side.merge(p.b)
}

// locateRest locates the states still open at the end (of processes
// without a change), a process after the other.
func (p *counter) locateRest() {
	rest := make([][2]uint32, 0, len(p.groups)+len(p.rawGroups))
	for k := range p.groups {
		rest = append(rest, k)
	}
	for k := range p.rawGroups {
		if _, ok := p.groups[k]; !ok {
			rest = append(rest, k)
		}
	}
	slices.SortFunc(rest, func(a, b [2]uint32) int {
		if a[0] != b[0] {
			return int(a[0]) - int(b[0])
		}
		return int(a[1]) - int(b[1])
	})
	for _, k := range rest {
		p.locateGroup(k[0], k[1])
	}
}

// apply replays one MTE record.
func (p *counter) apply(rec *trace.Record) {
	p.nameUpTo(rec.Time, false)
	pid, change := isChange(rec)
	if change {
		p.locateGroup(pid, p.epochs[pid])
		p.epochs[pid]++
	}
	if rec.Major == trace.MajorMTE || rec.Major == trace.MajorJITLoad {
		p.b.r.Apply(rec)
	}
	// A process's last change applied, its mappings are those of the
	// end: its last state is located now, not after every record (the
	// long-lived processes' states, most of the Locs, would otherwise come
	// in a burst at the end, named after the replay, on the critical path).
	if change && int(p.epochs[pid]) == len(p.changes[pid]) {
		p.locateGroup(pid, p.epochs[pid])
	}
	if rec.Major == trace.MajorSys && rec.Minor == trace.SysEvent {
		p.lastEvent = rec
	}
}

// nameUpTo names the threads whose first tick came before t (all: every
// one left), as the one reader names them at their first tick.
func (p *counter) nameUpTo(t uint64, all bool) {
	for len(p.firsts) > 0 && (all || p.firsts[0].time < t) {
		ft := p.firsts[0]
		p.firsts = p.firsts[1:]
		p.b.nameThread(ft.pid, ft.tid)
	}
}

// locateGroup locates the stacks and the user counts of one state of a
// process (its mappings are those of that state now).
func (p *counter) locateGroup(pid, epoch uint32) {
	k := [2]uint32{pid, epoch}
	gs := p.groups[k]
	rg := p.rawGroups[k]
	delete(p.groups, k)
	delete(p.rawGroups, k)
	// The state's tables of its stacks' located PCs: kept from state to
	// state (grown from empty for each, they were a tenth of the replay;
	// made for each at their size, fresh memory each time).
	if len(rg) > 0 {
		p.pcs[0].reset()
		p.pcs[1].reset()
		p.locateStacks(pid, rg, &p.pcs)
	}
	p.countRuns(pid, gs)
}

// countRuns locates the user addresses of the runs' counts and adds the
// counts: a process state's addresses each time met (a run's are
// distinct, the repeats across its threads and CPUs were a sixth of
// 163 k, and a table of them cost more than locating those again: sized
// per state, it was fresh memory).
func (p *counter) countRuns(pid uint32, gs []runRef) {
	if len(gs) == 0 {
		return
	}
	loc := p.b.userLocator(pid)
	for _, g := range gs {
		w := p.workers[g.w]
		run := &w.runs[g.r]
		for _, c := range w.counts[run.blk][run.lo:run.hi] {
			p.b.addEntry(run.pid, run.tid, loc.locate(c.ip), c.n)
		}
	}
}

// locateStacks locates a state's raw stacks and counts them among the
// located ones; pcs are its tables of located PCs, user and kernel frames
// (as the one reader's: not its ticks').
func (p *counter) locateStacks(pid uint32, gs []runRef, pcs *[2]pcMemo) {
	rep := p.b.rep
	s := &p.b.stk
	for _, g := range gs {
		w := p.workers[g.w]
		rs := w.raw(g.r)
		n := len(rs.pcs) / 8
		nk := int(rs.flags >> trace.UnwindKernShift)
		var lost uint64
		found := false
		if nk+1 < n {
			lost, found = p.b.leaf.missing(pid, le64(rs.pcs[8*nk:]), le64(rs.pcs[8*(nk+1):]), rs.flags)
		}
		p.b.frameBuf = p.b.frameBuf[:0]
		for i := n - 1; i >= 0; i-- { // root first
			pc := le64(rs.pcs[8*i:])
			if i > 0 && i != nk {
				pc-- // a return address: name the call, not what follows it
			}
			if i == nk && found {
				p.b.frameBuf = append(p.b.frameBuf, p.b.locate(pid, lost, false)) // the caller the walk lost
			}
			t := &pcs[0]
			if i < nk {
				t = &pcs[1]
			}
			idx, ok := t.get(pc)
			if !ok {
				idx = p.b.locate(pid, pc, i < nk)
				t.put(pc, idx)
			}
			p.b.frameBuf = append(p.b.frameBuf, idx)
		}
		truncated := rs.flags&trace.UnwindTruncated != 0
		j, _ := s.find(pid, rs.tid, truncated, p.b.frameBuf, uint16(min(nk, n)), rs.time, w.seq, rs.pos)
		st := s.at(j)
		st.n += rs.n
		if rs.time < st.time || rs.time == st.time && (w.seq < st.seq || w.seq == st.seq && rs.pos < st.pos) {
			st.time, st.seq, st.pos, st.kernel = rs.time, w.seq, rs.pos, uint16(min(nk, n))
		}
		rep.StackTicks += rs.n
		if truncated {
			rep.TruncatedStacks += rs.n
		}
		if rs.flags&trace.UnwindCFI != 0 {
			rep.CFIStacks += rs.n
		}
	}
}

// event sets the event-based sampling name: the last record in Records'
// order (an MTE record before a trace record of the same time).
func (p *counter) event() {
	last, lastSeq := p.lastEvent, -1
	for _, w := range p.workers {
		if e := w.event; e != nil {
			if last == nil || e.Time > last.Time || e.Time == last.Time && (last.MTE || w.seq > lastSeq) {
				last, lastSeq = e, w.seq
			}
		}
	}
	if last != nil {
		p.b.rep.Event, p.b.rep.EventPeriod = last.Str, last.Field(2)
	}
}
