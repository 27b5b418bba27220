package itrace

import (
	"testing"

	"perfinsp/format/trace"
	itracectl "perfinsp/libperfutil/itrace"
)

// TestExampleBreakpoint traces the example with breakpoint stepping:
// straight lines run natively, a hardware breakpoint stops each thread
// before its next branch, whose outcome the tracer computes. The counts
// equal callgrind's (traceExample), and the stops are about one per
// taken branch: at least one per taken branch not single-stepped (the
// tracer must see each), at most two (one more per jcc not taken), and
// single steps only for what cannot be evaluated (system calls, rep,
// instructions x86asm does not know).
func TestExampleBreakpoint(t *testing.T) {
	st, recs := traceExampleRecords(t, Options{Step: itracectl.StepBreakpoint})
	if st.Breakpoints != "work" {
		t.Fatalf("breakpoints %q: debug-register breakpoints must work on x86-64 Linux", st.Breakpoints)
	}
	taken := uint64(0)
	for _, r := range recs {
		if r.Major == trace.MajorITraceU && r.Minor >= trace.ITraceCall && r.Minor <= trace.ITraceIret {
			taken++
		}
	}
	stops := st.BreakpointStops + st.SingleSteps
	t.Logf("%d instructions, %d taken branches (%.3f per instruction): %d stops (%d at breakpoints, %d single steps), %.3f per instruction, %.2f per taken branch",
		st.Instructions, taken, float64(taken)/float64(st.Instructions), stops, st.BreakpointStops, st.SingleSteps,
		float64(stops)/float64(st.Instructions), float64(stops)/float64(taken))
	if taken < minChecked {
		t.Fatalf("%d taken branches, want > %d", taken, minChecked)
	}
	if st.BreakpointStops+st.SingleSteps < taken || stops > 2*taken {
		t.Errorf("%d stops for %d taken branches: want one to two per taken branch", stops, taken)
	}
	if st.SingleSteps*20 > st.BreakpointStops {
		t.Errorf("%d single steps beside %d breakpoint stops: most lines must run natively", st.SingleSteps, st.BreakpointStops)
	}
}
