package continuous

import (
	"cmp"
	"slices"
	"time"

	"golang.org/x/sys/unix"
)

// reorderWindow is how long events wait before they are applied: the
// sampler reads each CPU's ring in turn, so a process's fork record (on
// one CPU) can be read after its exec and first samples (on another).
// Events are applied in time order once they are this old: the name
// tables see a fork before the exec that follows it.
const reorderWindow = 300 * time.Millisecond

// reorder holds events until they are older than the window. Its events'
// stacks lie in its own pcs; the memory of both is reused.
type reorder struct {
	buf   []event
	pcs   []uint64
	spare []uint64
	// order is the scratch of release: the events' time stamps and
	// places, sorted (16 bytes an event, not the event's 88); kept is
	// where the events not released go, in time order.
	order []orderKey
	kept  []event
	max   int // past this many, the oldest are applied at once
}

// orderKey is an event's place in reorder.buf and its time stamp.
type orderKey struct {
	t uint64
	i uint32
}

// add copies b's events (and their stacks) in.
func (r *reorder) add(b *batch) {
	for i := range b.evs {
		e := b.evs[i]
		if e.pcN > 0 {
			off := len(r.pcs)
			r.pcs = append(r.pcs, b.stack(&e)...)
			e.pcOff = uint32(off)
		}
		r.buf = append(r.buf, e)
	}
}

// release applies, in time order, the events stamped at or before cutoff
// (and the oldest past the bound). Events of the same time stamp keep the
// order they came in.
func (r *reorder) release(cutoff uint64, apply func(e *event, pcs []uint64)) {
	if len(r.buf) == 0 {
		return
	}
	// The events are sorted through their keys: the kept ones (sorted
	// already) first, the new ones after them, ties by their place.
	order := r.order[:0]
	for i := range r.buf {
		order = append(order, orderKey{r.buf[i].t, uint32(i)})
	}
	slices.SortFunc(order, func(a, b orderKey) int {
		if c := cmp.Compare(a.t, b.t); c != 0 {
			return c
		}
		return cmp.Compare(a.i, b.i)
	})
	r.order = order
	n, _ := slices.BinarySearchFunc(order, cutoff+1, func(k orderKey, t uint64) int { return cmp.Compare(k.t, t) })
	if cutoff == ^uint64(0) {
		n = len(order)
	}
	if over := len(order) - r.max; over > n {
		n = over
	}
	for _, k := range order[:n] {
		e := &r.buf[k.i]
		apply(e, r.pcs[e.pcOff:e.pcOff+e.pcN])
	}
	// The events kept, and their stacks, move to the front, in time
	// order.
	kept, keptPCs := r.kept[:0], r.spare[:0]
	for _, k := range order[n:] {
		e := r.buf[k.i]
		off := len(keptPCs)
		keptPCs = append(keptPCs, r.pcs[e.pcOff:e.pcOff+e.pcN]...)
		e.pcOff = uint32(off)
		kept = append(kept, e)
	}
	clear(r.buf)
	r.kept, r.buf = r.buf[:0], kept
	r.spare, r.pcs = r.pcs[:0], keptPCs
}

func monoNow() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Sec)*1e9 + uint64(ts.Nsec)
}
