package tprof

import (
	"math/rand/v2"
	"strconv"
	"testing"

	"perfinsp/analysis/a2n"
)

// A thread no record named is labelled with its process's name (a new
// thread starts with its creator's comm), not "tid".
func TestThreadLabelFallsBackToProcessName(t *testing.T) {
	rep := &Report{
		ProcName: map[uint32]string{0x10: "xz"},
		ThreadNm: map[[2]uint32]string{{0x10, 0x11}: "", {0x10, 0x12}: "worker"},
	}
	for tid, want := range map[uint32]string{0x11: "xz_17", 0x12: "worker_18", 0x13: "xz_19"} {
		if got := rep.ThreadLabel(0x10, tid); got != want {
			t.Fatalf("thread %#x: %q, want %q", tid, got, want)
		}
	}
	if got := rep.ThreadLabel(0x20, 0x21); got != "tid_33" {
		t.Fatalf("thread of an unnamed process: %q", got)
	}
	// PI's form, in hex (post --hex-ids)
	rep.HexIDs = true
	if got, got2 := rep.ThreadLabel(0x10, 0x12), rep.ProcLabel(0x10); got != "worker_12" || got2 != "xz_10" {
		t.Fatalf("hex labels: %q, %q", got, got2)
	}
}

// Stacks gives the aggregated stacks with their names: root first, kernel
// frames marked, most ticks first.
func TestStacksNamed(t *testing.T) {
	rep := &Report{
		res: []a2n.Result{{Module: "m", Symbol: "main"}, {Module: "m", Symbol: "leaf"}, {Module: "[kernel]", Symbol: "irq"}},
		stk: []stackEntry{
			{pid: 1, tid: 2, frames: []int32{0, 1, 2}, kernel: 1, n: 5, truncated: true},
			{pid: 1, tid: 2, frames: []int32{0}, n: 3},
		},
	}
	st := rep.Stacks()
	if len(st) != 2 || st[0].N != 5 || !st[0].Truncated || st[1].N != 3 || len(st[1].Frames) != 1 ||
		st[0].Frames[0] != (Frame{Module: "m", Symbol: "main"}) || st[0].Frames[1] != (Frame{Module: "m", Symbol: "leaf"}) ||
		st[0].Frames[2] != (Frame{Module: "[kernel]", Symbol: "irq", Kernel: true}) {
		t.Fatalf("stacks: %+v %+v", st[0], st[1])
	}
}

// appendPct formats a share as strconv does the float (fmt's %.2f):
// every n of small totals (exact ties among them), random large ones,
// the bounds.
func TestAppendPct(t *testing.T) {
	check := func(n, total uint64) {
		t.Helper()
		want := strconv.FormatFloat(pct(n, total), 'f', 2, 64)
		if got := string(appendPct(nil, n, total)); got != want {
			t.Fatalf("appendPct(%d, %d) = %s, want %s", n, total, got, want)
		}
	}
	for total := uint64(0); total <= 2000; total++ {
		for n := uint64(0); n <= total; n++ {
			check(n, total)
		}
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for range 1_000_000 {
		total := 1 + rng.Uint64N(1<<uint(1+rng.IntN(40)))
		check(rng.Uint64N(total+1), total)
	}
	for _, c := range [][2]uint64{{1, 800}, {3, 800}, {1, 1<<38 - 1}, {1 << 37, 1<<38 - 1}, {1 << 37, 1 << 38}, {5, 3}, {7, 0}} {
		check(c[0], c[1])
	}
}
