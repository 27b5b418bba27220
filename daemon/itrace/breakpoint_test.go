package itrace

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	itracerep "perfinsp/analysis/itrace"
	"perfinsp/format/trace"
	itracectl "perfinsp/libperfutil/itrace"
)

// TestExampleBreakpoint traces the example with breakpoint stepping:
// straight lines run natively, a hardware breakpoint stops each thread
// before its next branch, whose outcome the tracer computes; direct jumps
// and calls, whose targets are known before they run, do not stop it,
// nor do conditional jumps whose two ways end at distinct breakpoints.
// The counts equal callgrind's (traceExample), and the stops are under
// two for three taken branches (the direct ones run through, a
// conditional jump costs no stop of its own), at least one per return
// (its target is on the stack), and single steps only for what cannot
// be evaluated (system calls, rep, instructions x86asm does not know).
func TestExampleBreakpoint(t *testing.T) {
	st, recs := traceExampleRecords(t, Options{Step: itracectl.StepBreakpoint})
	if st.Breakpoints != "work" {
		t.Fatalf("breakpoints %q: debug-register breakpoints must work on x86-64 Linux", st.Breakpoints)
	}
	taken, returns := uint64(0), uint64(0)
	for _, r := range recs {
		if r.Major == trace.MajorITraceU && r.Minor >= trace.ITraceCall && r.Minor <= trace.ITraceIret {
			taken++
			if r.Minor == trace.ITraceReturn {
				returns++
			}
		}
	}
	stops := st.BreakpointStops + st.SingleSteps
	t.Logf("%d instructions, %d taken branches (%.3f per instruction): %d stops (%d at breakpoints, %d single steps), %.3f per instruction, %.2f per taken branch",
		st.Instructions, taken, float64(taken)/float64(st.Instructions), stops, st.BreakpointStops, st.SingleSteps,
		float64(stops)/float64(st.Instructions), float64(stops)/float64(taken))
	if taken < minChecked {
		t.Fatalf("%d taken branches, want > %d", taken, minChecked)
	}
	if stops < returns || 3*stops >= 2*taken {
		t.Errorf("%d stops for %d taken branches, %d of them returns: want under two stops for three taken branches (direct jumps and calls run through, conditional jumps split), at least one per return", stops, taken, returns)
	}
	if st.SingleSteps*20 > st.BreakpointStops {
		t.Errorf("%d single steps beside %d breakpoint stops: most lines must run natively", st.SingleSteps, st.BreakpointStops)
	}
}

// TestBreakpointOnGzip traces a distribution program, gzip compressing a
// small file (the dynamic loader, libc's string functions with their AVX2
// and rep forms, deflate's loops), once single-stepped and once
// breakpoint-stepped: the same instructions (the runs differ a little by
// themselves: two single-stepped runs of it differed by 0.04 %; a thread
// lost to a breakpoint that never stopped it, or rep and AVX code
// miscounted, would be far more), and far fewer stops.
func TestBreakpointOnGzip(t *testing.T) {
	gz := needTool(t, "gzip")
	trace1 := func(step itracectl.Step) Stats {
		in := filepath.Join(t.TempDir(), "in.txt")
		if err := os.WriteFile(in, []byte(strings.Repeat("breakpoint stepping, single stepping: the same count\n", 8)), 0o644); err != nil {
			t.Fatal(err)
		}
		// startStopped's way, the compressed output to /dev/null
		cmd := exec.Command("sh", "-c", `kill -STOP $$; exec "$0" "$@"`, gz, "-c", in)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		waitState(t, cmd.Process.Pid, 'T')
		return traceToEnd(t, cmd, Options{Step: step}, &capture{})
	}
	sst := trace1(itracectl.StepSingle)
	bst := trace1(itracectl.StepBreakpoint)
	t.Logf("single: %d instructions, %d system calls, %d stops; breakpoint: %d instructions, %d system calls, %d stops (%d single steps)",
		sst.Instructions, sst.Syscalls, sst.SingleSteps, bst.Instructions, bst.Syscalls, bst.BreakpointStops+bst.SingleSteps, bst.SingleSteps)
	if sst.Instructions < 100000 {
		t.Fatalf("gzip single-stepped: %d instructions, want a whole run", sst.Instructions)
	}
	if d := int64(sst.Instructions) - int64(bst.Instructions); d*200 > int64(sst.Instructions) || -d*200 > int64(sst.Instructions) {
		t.Errorf("single-stepped %d instructions, breakpoint-stepped %d: want the same (within 0.5 %%)", sst.Instructions, bst.Instructions)
	}
	if bst.Breakpoints != "work" || (bst.BreakpointStops+bst.SingleSteps)*2 > bst.Instructions || bst.SingleSteps*20 > bst.BreakpointStops {
		t.Errorf("breakpoint-stepped gzip: breakpoints %q, %d breakpoint stops and %d single steps for %d instructions: want under one stop per two instructions, nearly all at breakpoints",
			bst.Breakpoints, bst.BreakpointStops, bst.SingleSteps, bst.Instructions)
	}
}

// TestBreakpointSignals traces an -O2 loop that a fast interval timer
// interrupts with a handled SIGALRM while it runs natively: runs cut
// short by a signal (at the branch a run started before, at a line's
// start, inside a line, on either way of a split conditional jump) count
// exactly what ran, so the loop's functions equal callgrind's whatever
// the signals' timing.
func TestBreakpointSignals(t *testing.T) {
	needTool(t, "gcc")
	dir := t.TempDir()
	prog := filepath.Join(dir, "sigloop")
	if b, err := exec.Command("gcc", "-O2", "-g", "-no-pie", "-o", prog, "testdata/sigloop.c").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, b)
	}
	const n = "20000"
	cg := callgrind(t, dir, prog, n)
	cmd := startStopped(t, prog, n)
	sink := &capture{}
	st := traceToEnd(t, cmd, Options{Step: itracectl.StepBreakpoint}, sink)
	t.Logf("%d instructions, %d signals, %d breakpoint stops, %d single steps, %d runs lost", st.Instructions, st.Signals, st.BreakpointStops, st.SingleSteps, st.BlocksLost)
	if st.Breakpoints != "work" {
		t.Fatalf("breakpoints %q: debug-register breakpoints must work on x86-64 Linux", st.Breakpoints)
	}
	if st.Signals < 20 {
		t.Fatalf("%d signals while traced: want the timer's many (the test checks runs cut short by them)", st.Signals)
	}
	if st.BlocksLost != 0 {
		t.Errorf("%d runs cut short where the tracer could not tell what ran", st.BlocksLost)
	}
	rep := replay(sink.recs, newELFNamer(t, prog))
	for _, name := range []string{"spin", "step"} {
		want := cg[name]
		got := rep.Funcs[itracerep.Key(itracerep.Func{Name: name, Module: "exe"})]
		if want == nil || got == nil {
			t.Errorf("%s: callgrind %v, itrace %v", name, want, got)
			continue
		}
		if got.Exclusive != want.Self || got.Calls != want.Calls {
			t.Errorf("%-5s itrace: %d instructions, %d calls; callgrind: %d, %d", name, got.Exclusive, got.Calls, want.Self, want.Calls)
		} else {
			t.Logf("%-5s %8d instructions %6d calls (= callgrind)", name, got.Exclusive, got.Calls)
		}
	}
}

// TestBreakpointRdssp: a line holding rdsspq (CET; glibc's setjmp and
// libgcc's unwinder run it), whose F3 prefix x86asm decodes alone as a
// 1-byte instruction. The line's end was then taken to be the next byte,
// inside rdsspq: the breakpoint put there never fired, and the thread ran
// on untraced to its exit (a C++ program's trace ended at its first
// throw). Breakpoint-stepped, the program is traced to its end with the
// counts single-stepping gives.
func TestBreakpointRdssp(t *testing.T) {
	needTool(t, "gcc")
	dir := t.TempDir()
	prog := filepath.Join(dir, "rdssp")
	if b, err := exec.Command("gcc", "-O2", "-g", "-no-pie", "-o", prog, "testdata/rdssp.c").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, b)
	}
	const n = 300
	counts := map[itracectl.Step]*itracerep.Report{}
	for _, step := range []itracectl.Step{itracectl.StepSingle, itracectl.StepBreakpoint} {
		cmd := startStopped(t, prog, fmt.Sprint(n))
		sink := &capture{}
		st := traceToEnd(t, cmd, Options{Step: step}, sink)
		t.Logf("%s: %d instructions, %d breakpoint stops, %d single steps", step, st.Instructions, st.BreakpointStops, st.SingleSteps)
		counts[step] = replay(sink.recs, newELFNamer(t, prog))
	}
	for _, name := range []string{"f", "main"} {
		k := itracerep.Key(itracerep.Func{Name: name, Module: "exe"})
		single, bp := counts[itracectl.StepSingle].Funcs[k], counts[itracectl.StepBreakpoint].Funcs[k]
		if single == nil || bp == nil || bp.Exclusive != single.Exclusive || bp.Calls != single.Calls {
			t.Errorf("%s: breakpoint-stepped %+v, single-stepped %+v", name, bp, single)
		}
	}
	if f := counts[itracectl.StepSingle].Funcs[itracerep.Key(itracerep.Func{Name: "f", Module: "exe"})]; f == nil || f.Calls != n {
		t.Errorf("f single-stepped: %+v, want %d calls", f, n)
	}
}
