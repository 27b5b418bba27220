package itrace

import (
	"os"
	"syscall"
	"testing"
	"time"
)

// sigcontStorm sends SIGCONT to p every 200 µs until done is closed. Each
// one makes the seized threads stop for PTRACE_EVENT_STOP on their way back
// to user mode, often between a step's (or a breakpoint's) trap and its
// report: what a shell's job control (fg, bg, kill -CONT) does to a traced
// program, many times over.
func sigcontStorm(p *os.Process, done <-chan struct{}) {
	tick := time.NewTicker(200 * time.Microsecond)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
			_ = p.Signal(syscall.SIGCONT) // a pidfd: never another process
		}
	}
}

// TestSIGCONTWhileTraced traces the example while it is sent SIGCONT
// thousands of times: every job-control stop between a resume and its trap
// is resumed as it was (NotifyStops counts them: the test proves nothing
// if there were none), and the counts still equal callgrind's — in the
// default stepping (here breakpoint runs through direct branches) and
// under the tests' emulated BTF, whose block checks catch a trap
// accounted twice.
func TestSIGCONTWhileTraced(t *testing.T) {
	for _, c := range []struct {
		name string
		opts Options
	}{
		{"auto", Options{}},
		{"emulated BTF", Options{emulateBTF: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			st, _ := traceExampleBeside(t, c.opts, sigcontStorm)
			t.Logf("%d job-control stops between a resume and its trap", st.NotifyStops)
			if st.NotifyStops == 0 {
				t.Errorf("no job-control stop came between a resume and its trap: the storm did not reach the tracer")
			}
			if st.BlockMismatches != 0 || st.BlocksLost != 0 {
				t.Errorf("%d block disagreements, %d uncounted blocks (want 0)", st.BlockMismatches, st.BlocksLost)
			}
		})
	}
}
