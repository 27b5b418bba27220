package continuous

import (
	"sort"
	"time"

	"golang.org/x/sys/unix"
)

// reorderWindow is how long events wait before they are applied: the
// sampler reads each CPU's ring in turn, so a process's fork record (on
// one CPU) can be read after its exec and first samples (on another).
// Events are applied in time order once they are this old: the name
// tables see a fork before the exec that follows it.
const reorderWindow = 300 * time.Millisecond

// reorder holds events until they are older than the window.
type reorder struct {
	buf []event
	max int // past this many, the oldest are applied at once
}

func (r *reorder) add(e event) { r.buf = append(r.buf, e) }

// release applies, in time order, the events stamped at or before cutoff
// (and the oldest past the bound).
func (r *reorder) release(cutoff uint64, apply func(*event)) {
	if len(r.buf) == 0 {
		return
	}
	sort.SliceStable(r.buf, func(i, j int) bool { return r.buf[i].t < r.buf[j].t })
	n := sort.Search(len(r.buf), func(i int) bool { return r.buf[i].t > cutoff })
	if over := len(r.buf) - r.max; over > n {
		n = over
	}
	for i := 0; i < n; i++ {
		apply(&r.buf[i])
		r.buf[i] = event{}
	}
	r.buf = append(r.buf[:0], r.buf[n:]...)
}

func monoNow() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Sec)*1e9 + uint64(ts.Nsec)
}
