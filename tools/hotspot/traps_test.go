package main

import (
	"encoding/binary"
	"math"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"perfinsp/libperfutil/uprobe"
)

// twoSites is a level of one function probed on two threads: its exit
// (the dearer site, hit most) and its entry, one event per thread each.
func twoSites() (*levelRun, probeSite, probeSite) {
	fs := &FuncStat{Func: Func{Name: "f", Off: 0x100}, costNs: 40000, entryNs: 1000}
	entry, exit := probeSite{fs, 0x100}, probeSite{fs, 0x180}
	w := &Walk{closes: 4, closeSum: float64(4 * 100 * time.Millisecond)}
	r := &levelRun{w: w, refs: map[uint64]probeRef{}, siteHits: map[probeSite]uint64{},
		traps: map[*uprobe.Probe]*trapCount{}, shares: map[probeSite]siteShare{}, winSite: map[probeSite]float64{}, counted: true}
	id := uint64(0)
	for _, k := range []probeSite{exit, exit, entry, entry} {
		id++
		p := &uprobe.Probe{FD: -1, ID: id}
		r.probes = append(r.probes, p)
		r.refs[id] = probeRef{fs, k == exit, k.off}
		r.track(p, k)
	}
	r.siteHits[exit], r.siteHits[entry] = 1000, 1000
	return r, entry, exit
}

// TestPredictClose: closing a window costs, per close (one grace period
// each), the cost rates of the sites whose breakpoints are still in —
// a site's goes when its last event's close begins — at most the
// target's CPU rate.
func TestPredictClose(t *testing.T) {
	r, entry, exit := twoSites()
	if got := r.traps[r.probes[0]].costNs; got != 39000 {
		t.Fatalf("an exit trap costs %v, want the probed call's cost less the entry's (39000)", got)
	}
	on := 200 * time.Millisecond
	// The exit's traps cost half the target's time, the entry's a tenth.
	r.winSite[exit], r.winSite[entry] = 0.5*float64(on), 0.1*float64(on)
	r.cpuRate = 2
	// Closes: exit, exit (its breakpoint goes as this one begins), entry, entry.
	want := 0.1 * 1e9 * (0.6 + 0.1 + 0.1)
	if got := r.predictClose(on); math.Abs(got-want) > 1 {
		t.Errorf("predicted close %.1f ms, want %.1f ms", got/1e6, want/1e6)
	}
	// A thread that runs at 0.3 of a CPU spends at most that in traps.
	r.cpuRate = 0.3
	want = 0.1 * 1e9 * (0.3 + 0.1 + 0.1)
	if got := r.predictClose(on); math.Abs(got-want) > 1 {
		t.Errorf("capped at 0.3 CPU: predicted close %.1f ms, want %.1f ms", got/1e6, want/1e6)
	}
	if got := r.predictClose(0); got != 0 {
		t.Errorf("no time on: predicted %v, want 0", got)
	}
}

// TestCloseOrderAndShares: of one site's events the busiest closes last;
// once one is closed, its share of the site's hits weighs the hidden
// traps of the open ones.
func TestCloseOrderAndShares(t *testing.T) {
	r, _, exit := twoSites()
	r.traps[r.probes[0]].last, r.traps[r.probes[1]].last = 900, 100
	order := r.closeOrder()
	if order[0] != r.probes[1] || order[1] != r.probes[0] {
		t.Fatalf("close order %v %v: want the exit's quiet event (100 hits) before its busy one (900)", order[0].ID, order[1].ID)
	}
	r.closed(r.probes[1])
	if sh := r.shares[exit]; sh.closed != 100 || sh.open != 900 {
		t.Errorf("shares after closing the quiet event: %+v, want closed 100 open 900", sh)
	}
	// Closed the busy one instead: the open one's hits stand for 9 times as many.
	r2, _, exit2 := twoSites()
	r2.traps[r2.probes[0]].last, r2.traps[r2.probes[1]].last = 900, 100
	r2.closed(r2.probes[0])
	if sh := r2.shares[exit2]; sh.closed != 900 || sh.open != 100 {
		t.Errorf("shares after closing the busy event: %+v, want closed 900 open 100", sh)
	}
}

// TestCountTrapsHidden: the traps since the last reading are charged at
// their site's cost, and those of a half-closed site with the unseen hits
// of its closed events (the open events' new hits times the closed share
// over the open one). The probe's count is read from its fd (a pipe
// holding the 8-byte count stands in for the perf event).
func TestCountTrapsHidden(t *testing.T) {
	r, _, exit := twoSites()
	busy, quiet := r.probes[0], r.probes[1]
	r.traps[busy].last, r.traps[quiet].last = 900, 100
	r.closed(busy) // the busy event went first: its hits are now unseen
	var fds [2]int
	if err := unix.Pipe(fds[:]); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], 110) // 10 new hits
	if _, err := unix.Write(fds[1], b[:]); err != nil {
		t.Fatal(err)
	}
	quiet.FD = fds[0]
	r.closing = true
	r.countTraps()
	quiet.FD = -1
	if want := 10.0 + 10*9; r.w.Traps != want || r.lv.CloseTraps != want {
		t.Errorf("charged %v traps (%v while closing), want %v: 10 seen and 90 unseen", r.w.Traps, r.lv.CloseTraps, want)
	}
	if want := 100 * 39000.0; math.Abs(r.w.CostNs-want) > 1e-6 || r.winCost != 0 {
		t.Errorf("charged %v ns (window %v), want %v as closing cost", r.w.CostNs, r.winCost, want)
	}
	if r.siteHits[exit] != 1000+10 {
		t.Errorf("site hits %d, want 1010 (the 10 seen added)", r.siteHits[exit])
	}
}
