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
	max   int // past this many, the oldest are applied at once
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
// (and the oldest past the bound).
func (r *reorder) release(cutoff uint64, apply func(e *event, pcs []uint64)) {
	if len(r.buf) == 0 {
		return
	}
	slices.SortStableFunc(r.buf, func(a, b event) int { return cmp.Compare(a.t, b.t) })
	n, _ := slices.BinarySearchFunc(r.buf, cutoff+1, func(e event, t uint64) int { return cmp.Compare(e.t, t) })
	if cutoff == ^uint64(0) {
		n = len(r.buf)
	}
	if over := len(r.buf) - r.max; over > n {
		n = over
	}
	for i := 0; i < n; i++ {
		e := &r.buf[i]
		apply(e, r.pcs[e.pcOff:e.pcOff+e.pcN])
	}
	// The events kept, and their stacks, move to the front.
	kept := r.spare[:0]
	for i := n; i < len(r.buf); i++ {
		e := r.buf[i]
		off := len(kept)
		kept = append(kept, r.pcs[e.pcOff:e.pcOff+e.pcN]...)
		e.pcOff = uint32(off)
		r.buf[i-n] = e
	}
	clear(r.buf[len(r.buf)-n:])
	r.buf = r.buf[:len(r.buf)-n]
	r.spare, r.pcs = r.pcs[:0], kept
}

func monoNow() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Sec)*1e9 + uint64(ts.Nsec)
}
