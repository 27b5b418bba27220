package main

import (
	"encoding/binary"
	"time"

	"golang.org/x/sys/unix"

	"perfinsp/libperfutil/uprobe"
)

// The budget charges every trap a probe costs the target, not only the
// hits whose records were read: a breakpoint traps on every call while it
// is in place, also when the ring is full (a lost record), and while the
// probes are being closed — a close of a probe of the uprobe PMU waits for
// a kernel grace period with the probes still open in place (one held by
// a dynamic event does not: uprobe.Dynamic), and a site whose event on one
// CPU (or thread) is already closed keeps its breakpoint, and traps
// unseen, until its last event is closed. So the counts come from the probes'
// perf events themselves (read(2): every hit while enabled), and the
// unseen traps of a half-closed site are estimated from its open events'
// counts, weighted by the share of the site's hits its closed events had.
// A function called millions of times a second costs far more in those
// traps than in the records read.

// trapCount is one probe event's count and what one of its traps costs.
type trapCount struct {
	site   probeSite
	costNs float64 // the calibrated cost of one trap at its instruction
	last   uint64  // the count read so far
	closed bool
}

// siteShare is how a site's hits so far split between its events that are
// closed (their traps now unseen) and those still open.
type siteShare struct{ open, closed uint64 }

// readCount reads a probe event's count (read_format 0: one u64).
func readCount(fd int) (uint64, bool) {
	var b [8]byte
	if n, err := unix.Read(fd, b[:]); err != nil || n != 8 {
		return 0, false
	}
	return binary.LittleEndian.Uint64(b[:]), true
}

// trapCost is what one trap of the probe at site costs: an entry the
// function's entry cost, an exit the rest of a probed call's.
func trapCost(k probeSite) float64 {
	if k.off == k.fs.Off {
		return k.fs.entryNs
	}
	return max(k.fs.costNs-k.fs.entryNs, 0)
}

// count is probe p's count so far (0 if not counted).
func (r *levelRun) count(p *uprobe.Probe) uint64 {
	if tc := r.traps[p]; tc != nil {
		return tc.last
	}
	return 0
}

// track starts counting probe p's traps (counted levels only).
func (r *levelRun) track(p *uprobe.Probe, k probeSite) {
	if r.counted {
		r.traps[p] = &trapCount{site: k, costNs: trapCost(k)}
	}
}

// countTraps reads every open probe's count and charges the traps since
// the last reading, with the unseen traps of half-closed sites.
func (r *levelRun) countTraps() {
	if !r.counted {
		return
	}
	w := r.w
	for _, p := range r.probes {
		tc := r.traps[p]
		if tc == nil || tc.closed || p.FD < 0 {
			continue
		}
		v, ok := readCount(p.FD)
		if !ok || v <= tc.last {
			continue
		}
		d := v - tc.last
		tc.last = v
		n := float64(d)
		if sh := r.shares[tc.site]; sh.closed > 0 && sh.open > 0 {
			n += float64(d) * float64(sh.closed) / float64(sh.open)
		}
		c := n * tc.costNs
		r.siteHits[tc.site] += d
		w.Traps += n
		w.CostNs += c
		r.winSite[tc.site] += c
		if r.closing {
			r.lv.CloseTraps += n
		} else {
			r.winCost += c
		}
	}
}

// closed notes that probe p is closed: its site's hits split anew
// between its closed and open events.
func (r *levelRun) closed(p *uprobe.Probe) {
	tc := r.traps[p]
	if tc == nil {
		return
	}
	tc.closed = true
	var sh siteShare
	for _, q := range r.probes {
		if t := r.traps[q]; t != nil && t.site == tc.site {
			if t.closed {
				sh.closed += t.last
			} else {
				sh.open += t.last
			}
		}
	}
	r.shares[tc.site] = sh
}

// predictClose is what closing the window's probes now would cost: the
// probes close one at a time, each as long as the walk's closes so far
// (w.closeNs: a grace period for a probe of the uprobe PMU), and
// a site traps at its window's cost rate until its last event's close
// begins; at most the target's CPU rate is spent in traps at any moment.
func (r *levelRun) predictClose(onFor time.Duration) float64 {
	if onFor <= 0 || len(r.probes) == 0 {
		return 0
	}
	order := r.closeOrder()
	last := map[probeSite]int{}
	for i, p := range order {
		ref := r.refs[p.ID]
		last[probeSite{ref.fs, ref.off}] = i
	}
	rate := map[probeSite]float64{}
	for k, c := range r.winSite {
		rate[k] = c / float64(onFor)
	}
	gp := r.w.closeNs()
	var cost float64
	for j := range order {
		var sum float64
		for k, l := range last {
			if j < l {
				sum += rate[k]
			}
		}
		cost += min(sum, r.cpuRate) * gp
	}
	return cost
}

// closeNs is the time one probe's close takes: the mean of this walk's
// closes, or the calibration's (whose probes are opened as the walk's)
// before the first.
func (w *Walk) closeNs() float64 {
	if w.closes > 0 {
		return w.closeSum / float64(w.closes)
	}
	if w.Cal != nil && w.Cal.CloseNs > 0 {
		return w.Cal.CloseNs
	}
	return float64(50 * time.Millisecond)
}

// noteClose adds one close's duration to the walk's mean.
func (w *Walk) noteClose(d time.Duration) {
	w.closes++
	w.closeSum += float64(d)
}

// affordable says whether the walk can spend extra more and stay within
// the budget's aim of the target's CPU so far.
func (w *Walk) affordable(extra float64) bool {
	return costWithin(w.totalCost()+extra, w.meter.ns(), w.aim())
}
