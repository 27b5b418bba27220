package tprof

import (
	"encoding/binary"

	"perfinsp/analysis/a2n"
	"perfinsp/format/trace"
)

// oneReader counts a trace read by the one reader (Records: every record
// in time order), with the counter of the CPUs' readers and one worker:
// the reader selects the ticks and stacks (the filter, as of their time),
// gives them to the worker, and at a record that changes a process's
// mappings has that process's state counted and located before applying
// the record. It also names the ticks given to onRecord (atOnce).
type oneReader struct {
	b    *builder
	p    *counter
	w    *tickWorker
	hook *atOnce  // nil without onRecord, or with its ticks unnamed
	pcs  []byte   // an UNWIND record's PCs
	user []uint64 // their user part (javaStack)
}

// countSerial counts b's trace with the one reader; the error is that of
// a record that does not decode (what came before it is counted).
func countSerial(b *builder) error {
	p := newCounter(b)
	w := newTickWorker(0, nil)
	w.live = p.epochs
	p.workers = []*tickWorker{w}
	o := &oneReader{b: b, p: p, w: w}
	if b.onRecord != nil && !b.unnamed {
		o.hook = newAtOnce(b.r)
	}
	err := b.f.Records(o.record)
	w.tc.flushAll()
	p.gatherTotals()
	p.gatherCounts()
	side := startSide(b.r, p.workers, p.kernelRuns)
	p.locateRest()
	side.merge(b)
	return err
}

// record takes one record, in time order.
func (o *oneReader) record(rec *trace.Record) error {
	b := o.b
	if b.progress != nil {
		b.progress.add(trace.EncodedSize(rec.Major, rec.Minor, rec.Layout, len(rec.Fixed), rec.Str))
	}
	switch rec.Major {
	case trace.MajorMTE, trace.MajorJITLoad:
		o.mappings(rec)
		return nil
	case trace.MajorTprof:
		o.tick(rec)
		return nil
	case trace.MajorUnwind:
		if rec.Minor == trace.UnwindTick { // not a wait's stack (UNWIND_SWITCH)
			o.stack(rec)
		}
	case trace.MajorSys:
		if rec.Minor == trace.SysEvent {
			b.rep.Event, b.rep.EventPeriod = rec.Str, rec.Field(2)
		}
	}
	if b.onRecord != nil {
		b.onRecord(rec, nil)
	}
	return nil
}

// mappings applies an MTE or JIT record; one that changes its process's
// mappings ends the process's state: its ticks and stacks so far are
// counted and located in the state they were in, before the record
// changes it.
func (o *oneReader) mappings(rec *trace.Record) {
	b := o.b
	pid, changes := isChange(rec)
	if changes {
		o.w.tc.flushPid(pid)
		o.p.gatherCounts()
		o.p.locateGroup(pid, o.p.epochs[pid])
		o.p.epochs[pid]++
		o.w.havePid = false // (the worker keeps the last pid's state at hand)
		if o.hook != nil {
			o.hook.endState(pid)
		}
	}
	b.r.Apply(rec)
	if changes && rec.Major == trace.MajorMTE && rec.Minor == trace.MTEFork && b.filt != nil && b.filt.Children && b.filt.Pids[uint32(rec.Field(0))] {
		b.filt.Pids[pid] = true // a process (or thread) the selection created
	}
	if b.onRecord != nil {
		b.onRecord(rec, nil)
	}
}

// tick gives a selected TPROF_TICK record to the worker.
func (o *oneReader) tick(rec *trace.Record) {
	b := o.b
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
	o.w.pos++
	if o.w.tick(rec.CPU, rec.Time, pid, tid, ip, uint32(rec.Field(3))) {
		b.nameThread(pid, tid)
		b.prefetch(pid, ip, kernel)
	} else if o.w.total&1023 == 0 {
		// the counting locates addresses only when a process's state
		// ends: its modules start loading now
		b.prefetch(pid, ip, kernel)
	}
	if b.onRecord != nil {
		res := &unnamedTick
		if o.hook != nil {
			res = o.hook.name(pid, ip, kernel)
		}
		b.onRecord(rec, res)
	}
}

// stack gives a selected UNWIND record's stack to the worker; its place
// is its order in the trace (time 0: the records of the one reader may go
// back in time).
func (o *oneReader) stack(rec *trace.Record) {
	pid, tid := uint32(rec.Field(0)), uint32(rec.Field(1))
	if !o.b.selected(pid, tid) {
		return
	}
	o.pcs = append(o.pcs[:0], rec.Str...)
	if o.b.java {
		o.pcs = o.javaStack(pid, tid, rec.Time, rec.Field(2), o.pcs)
	}
	o.w.pos++
	o.w.stack(0, pid, tid, rec.Field(2), o.pcs)
}

// javaStack is a stack's PCs with its Java frames named by the JProf
// agent's samples (a2n.JavaStack): the kernel's PCs as they are, then
// the user's.
func (o *oneReader) javaStack(pid, tid uint32, t, flags uint64, pcs []byte) []byte {
	n, nk := len(pcs)/8, int(flags>>trace.UnwindKernShift)
	if nk >= n {
		return pcs
	}
	o.user = o.user[:0]
	for i := nk; i < n; i++ {
		o.user = append(o.user, binary.LittleEndian.Uint64(pcs[8*i:]))
	}
	user := o.b.r.JavaStack(pid, tid, t, o.user)
	out := pcs[:8*nk]
	for _, pc := range user {
		out = binary.LittleEndian.AppendUint64(out, pc)
	}
	return out
}

// unnamedTick is the Result of every tick onRecord is given unnamed.
var unnamedTick a2n.Result

// atOnce names the ticks onRecord is given, as they are read: each
// address once per state of its process, user and kernel apart (the name
// of an address must not depend on which it was first met as). A name is
// its result, interned (one per module and symbol: an address's own
// result kept per address is memory the collector scans), and its offset.
type atOnce struct {
	r     *a2n.Resolver
	in    *interner
	byPid map[uint32]*[2]map[uint64]namedAt
}

// namedAt is an address's name: its result (in atOnce's interner) and
// its offset from the symbol.
type namedAt struct {
	res int32
	off uint64
}

func newAtOnce(r *a2n.Resolver) *atOnce {
	return &atOnce{r: r, in: &interner{nameNum: map[string]int32{}, intern: map[uint64]int32{}}, byPid: map[uint32]*[2]map[uint64]namedAt{}}
}

func (h *atOnce) name(pid uint32, ip uint64, kernel bool) *a2n.Result {
	t := h.byPid[pid]
	if t == nil {
		t = &[2]map[uint64]namedAt{}
		h.byPid[pid] = t
	}
	k := 0
	if kernel {
		k = 1
	}
	if t[k] == nil {
		t[k] = map[uint64]namedAt{}
	}
	n, ok := t[k][ip]
	if !ok {
		res := h.r.Resolve(pid, ip, kernel)
		n = namedAt{h.in.result(res), res.Offset}
		t[k][ip] = n
	}
	res := h.in.results[n.res]
	res.Offset = n.off
	return &res
}

// endState drops pid's names (its mappings change).
func (h *atOnce) endState(pid uint32) { delete(h.byPid, pid) }
