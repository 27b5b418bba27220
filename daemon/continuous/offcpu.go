package continuous

// Off-CPU time (Config.OffCPU): from the scheduler's switch records, the
// time each thread spent switched out to wait (sleeping or blocked), from
// its switch-out to its switch-in (the time it waited to run again once
// woken included), counted in nanoseconds under the stack it was switched
// out with. A wait still going on when an interval ends is counted up to
// the end of the interval and goes on in the next: an interval holds the
// off-CPU time that fell in it.

// wait is a thread's wait under way.
type wait struct {
	pid     uint32
	from    uint64 // when it began, or when the last interval it was counted in ended
	gen     uint32 // the process's exec generation at the switch-out
	kernel  uint16
	pcs     []uint64 // its stack (memory reused from one wait to the next)
	active  bool     // switched out to wait, not yet switched in
	stacked bool     // its stack came
	exited  uint64   // when the thread exited (0: it has not)
}

// maxWaits bounds the threads followed (cleared when full: exits whose
// records were lost would otherwise keep theirs).
const maxWaits = 1 << 16

// exitedKept is how long a thread's exit is remembered: a switch-out of
// the thread stamped before its exit but applied after it (records of
// one CPU late behind another's) begins no wait that nothing would end.
const exitedKept = 10_000_000_000 // ns

// offCPU follows the threads' waits for the aggregator.
type offCPU struct {
	waits map[uint32]*wait // by tid
	// Of the waits begun: those whose stack did not come (a stack the
	// kernel could not take, or its record lost), not counted.
	unstacked uint64
}

func newOffCPU() *offCPU { return &offCPU{waits: map[uint32]*wait{}} }

// switched applies a switch record: the thread switched out to wait (tid,
// 0 for none) begins a wait; the thread switched in ends its own.
func (a *aggregator) switched(e *event) {
	o := a.off
	if next := uint32(e.fields[1]); next != 0 {
		// (A switch-in stamped before the wait began is a late record
		// of an earlier one: it ends nothing.)
		if w := o.waits[next]; w != nil && w.active && e.t >= w.from {
			a.chargeWait(next, w, e.t)
			w.active = false
		}
	}
	if e.tid == 0 {
		return
	}
	w := o.waits[e.tid]
	if w == nil {
		if len(o.waits) >= maxWaits {
			clear(o.waits)
		}
		w = &wait{}
		o.waits[e.tid] = w
	}
	if w.exited != 0 {
		if e.t < w.exited {
			return // late: the thread is gone
		}
		w.exited = 0 // the tid is another thread's now
	}
	if w.active && !w.stacked {
		o.unstacked++
	}
	w.pid, w.from, w.gen, w.active, w.stacked = e.pid, e.t, a.gens[e.pid], true, false
}

// waitStack gives the wait that began at e.t its stack.
func (a *aggregator) waitStack(e *event, pcs []uint64) {
	w := a.off.waits[e.tid]
	if w == nil || !w.active || w.stacked || w.from != e.t {
		return
	}
	w.pcs = append(w.pcs[:0], pcs...)
	w.kernel, w.stacked = e.kernel, true
}

// threadExited ends tid's wait uncounted at its exit (t) and remembers
// the exit for exitedKept.
func (o *offCPU) threadExited(tid uint32, t uint64) {
	w := o.waits[tid]
	if w == nil {
		if len(o.waits) >= maxWaits {
			clear(o.waits)
		}
		w = &wait{}
		o.waits[tid] = w
	}
	w.active, w.exited = false, t
}

// chargeWait counts the wait of tid from its start to end in the current
// interval.
func (a *aggregator) chargeWait(tid uint32, w *wait, end uint64) {
	if !w.stacked {
		a.off.unstacked++
		return
	}
	if end <= w.from {
		return
	}
	ns := int64(end - w.from)
	iv := a.cur
	key := stackKey(iv.key[:0], w.pid, tid, w.gen, w.kernel, w.pcs)
	iv.key = key
	if sc, ok := iv.offStacks[string(key)]; ok {
		sc.count += ns
		iv.offNS += ns
		return
	}
	if len(iv.offStacks) >= a.limits.Stacks {
		iv.offDropped += ns
		return
	}
	locs, ok := a.locateStack(iv, w.pid, w.gen, w.from, int(w.kernel), w.pcs)
	if !ok {
		iv.offDropped += ns
		return
	}
	a.counted(iv, w.pid, tid)
	sc := &stackCount{pid: w.pid, tid: tid, locs: locs, count: ns}
	iv.offStacks[string(key)] = sc
	iv.offOrder = append(iv.offOrder, sc)
	iv.offNS += ns
}

// endWaits counts the waits under way up to end (the end of the current
// interval, on the records' clock): the rest of each is the next
// interval's.
func (a *aggregator) endWaits(end uint64) {
	for tid, w := range a.off.waits {
		if w.exited != 0 && end > w.exited+exitedKept {
			delete(a.off.waits, tid)
			continue
		}
		if w.active && w.stacked && end > w.from {
			a.chargeWait(tid, w, end)
			w.from = end
		}
	}
}
