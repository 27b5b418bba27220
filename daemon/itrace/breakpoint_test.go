package itrace

import (
	"testing"

	itracectl "perfinsp/libperfutil/itrace"
)

// TestExampleBreakpoint traces the example with breakpoint stepping:
// straight lines run natively, a hardware breakpoint stops each thread
// before its next branch, whose outcome the tracer computes. The counts
// equal callgrind's (traceExample), and the stops are about one per
// branch: far fewer than one per instruction.
func TestExampleBreakpoint(t *testing.T) {
	st := traceExample(t, Options{Step: itracectl.StepBreakpoint})
	if st.Breakpoints != "work" {
		t.Fatalf("breakpoints %q: debug-register breakpoints must work on x86-64 Linux", st.Breakpoints)
	}
	stops := st.BreakpointStops + st.SingleSteps
	t.Logf("%d instructions: %d stops (%d at breakpoints, %d single steps, %d breakpoint runs), %.3f per instruction",
		st.Instructions, stops, st.BreakpointStops, st.SingleSteps, st.BreakpointRuns, float64(stops)/float64(st.Instructions))
	if st.BreakpointStops < minChecked {
		t.Errorf("%d breakpoint stops, want > %d", st.BreakpointStops, minChecked)
	}
}
