package itrace

import (
	"testing"
	"time"

	"perfinsp/format/trace"
	"perfinsp/internal/testenv"
)

// deepStream is a thread of main (0x1000) calling f (0x2000), which
// recurses until depth frames of f are open, then returns all the way.
func deepStream(depth int) []*trace.Record {
	U := trace.MajorITraceU
	recs := []*trace.Record{rec(U, trace.ITraceStart, 7, 8, 0x1000, 0), rec(U, trace.ITraceCall, 0x2000, 3, 3)}
	for i := 1; i < depth; i++ {
		recs = append(recs, rec(U, trace.ITraceCall, 0x2000, 3, 3))
	}
	for i := 1; i < depth; i++ {
		recs = append(recs, rec(U, trace.ITraceReturn, 0x2008, 2, 1))
	}
	return append(recs, rec(U, trace.ITraceReturn, 0x1008, 2, 1), rec(U, trace.ITraceEnd, 7, 8, 2, 1, trace.ITraceEndExit))
}

// TestDeepRecursionReplayLinear: replaying a recursion 16 times as deep
// does not take the square of that longer (every return scanned the whole
// stack for a signal handler: 76 s at depth 100,000), with the stacks on,
// and the counts are exact. Linear work still grows faster than the depth
// here (the deep run's stack and tree leave the caches: 50 to 80 times
// seen), quadratic went past 400 times: the bound is 200. The shorter
// time is the best of five runs.
func TestDeepRecursionReplayLinear(t *testing.T) {
	// Times of one process compared: a busy machine can slow one run and
	// not the other, so the comparison is made up to three times.
	testenv.Retry(t, 3, "replay time linear in the depth", func(a *testenv.Attempt) { deepReplayOnce(t, a) })
}

func deepReplayOnce(t *testing.T, a *testenv.Attempt) {
	best := map[int]time.Duration{}
	for _, depth := range []int{4000, 64000} {
		recs := deepStream(depth)
		tries := 5
		if depth > 4000 {
			tries = 2
		}
		for try := 0; try < tries; try++ {
			rep := NewReport(mapNamer{}, nil)
			rep.EnableStacks()
			start := time.Now()
			for _, r := range recs {
				rep.Apply(r)
			}
			rep.Finish()
			if d := time.Since(start); try == 0 || d < best[depth] {
				best[depth] = d
			}
			f := rep.Funcs[Key(Func{Name: "f", Module: "/bin/prog"})]
			if f == nil || f.Calls != uint64(depth) || f.Exclusive != uint64(5*depth-3) || f.Inclusive != uint64(5*depth-3) || rep.Instructions != uint64(5*depth+2) {
				t.Fatalf("depth %d: f %+v, %d instructions", depth, f, rep.Instructions)
			}
		}
		t.Logf("depth %d: %v", depth, best[depth])
	}
	if best[64000] > 200*best[4000] {
		a.Errorf("16 times the depth took %.0f times as long (%v, then %v): quadratic", float64(best[64000])/float64(best[4000]), best[4000], best[64000])
	}
}
