package itrace

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"perfinsp/format/trace"

	itracerep "perfinsp/analysis/itrace"
)

// waitInRead waits until process pid blocks in a read(2) of fd 3; stop
// runs before a failure (the tracer's Stop, or nothing).
func waitInRead(t *testing.T, pid int, stop func()) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		sc, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/syscall")
		st, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
		if strings.HasPrefix(string(sc), "0 0x3 ") && strings.Contains(string(st), "S (sleeping)") {
			return
		}
		if time.Now().After(deadline) {
			stop()
			t.Fatalf("process %d did not block in its read of fd 3", pid)
		}
		time.Sleep(time.Millisecond)
	}
}

// A read interrupted by a handler (SIGUSR2, SA_RESTART) that feeds the
// pipe: the kernel moves ip back to the syscall instruction before the
// handler's frame, rt_sigreturn returns to it and the read runs again.
// The machine runs that syscall instruction twice and callgrind counts it
// twice (unlike a restart without a handler, which valgrind makes itself
// and counts once: TestRestartedReadMatchesCallgrind), so the trace must:
// read_raw, the handler and their callers equal callgrind's counts of the
// same run.
func TestRestartAfterHandlerMatchesCallgrind(t *testing.T) {
	needTool(t, "valgrind")
	dir := t.TempDir()
	prog := buildEdge(t, dir)

	// callgrind's run, signalled the same way
	out := filepath.Join(dir, "callgrind.out")
	vg := exec.Command("valgrind", "--tool=callgrind", "--callgrind-out-file="+out, prog, "restart-handler")
	var vgOut bytes.Buffer
	vg.Stdout, vg.Stderr = &vgOut, &vgOut
	if err := vg.Start(); err != nil {
		t.Fatal(err)
	}
	waitInRead(t, vg.Process.Pid, func() { vg.Process.Kill() })
	_ = vg.Process.Signal(syscall.SIGUSR2)
	if err := vg.Wait(); err != nil {
		t.Fatalf("valgrind: %v\n%s", err, vgOut.Bytes())
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	cg, err := itracerep.ParseCallgrind(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}

	cmd := startStopped(t, prog, "restart-handler")
	sink := &capture{}
	tr, err := Start(Options{PIDs: []int{cmd.Process.Pid}, AtExec: true}, sink)
	if err != nil {
		cmd.Process.Kill()
		t.Fatal(err)
	}
	_ = cmd.Process.Signal(syscall.SIGCONT)
	waitInRead(t, cmd.Process.Pid, func() { tr.Stop() })
	_ = cmd.Process.Signal(syscall.SIGUSR2)
	waitTracerDone(t, tr)
	_ = cmd.Wait()
	expectCallgrindCounts(t, cg, sink.recs, prog, "main", "restart_handler", "read_raw", "feed_handler", "in_handler")
}

// buildEdge compiles scripts/vmtest/progs/itrace_edge.c into dir.
func buildEdge(t *testing.T, dir string) string {
	t.Helper()
	needTool(t, "gcc")
	prog := filepath.Join(dir, "itrace_edge")
	if b, err := exec.Command("gcc", "-O1", "-g", "-fno-inline", "-fno-optimize-sibling-calls", "-no-pie", "-o", prog,
		"../../scripts/vmtest/progs/itrace_edge.c").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, b)
	}
	return prog
}

// waitTracerDone waits until the tracer ended (the traced program's last
// thread exited), at most 120 s.
func waitTracerDone(t *testing.T, tr *Tracer) {
	t.Helper()
	select {
	case <-tr.Done():
	case <-time.After(120 * time.Second):
		tr.Stop()
		t.Fatal("tracer did not end within 120 s")
	}
}

// expectCallgrindCounts replays the records of prog and checks each named
// function's exclusive instructions and calls against callgrind's.
func expectCallgrindCounts(t *testing.T, cg map[string]*itracerep.CGFunc, recs []trace.Record, prog string, names ...string) {
	t.Helper()
	rep := replay(recs, newELFNamer(t, prog))
	got := map[string]*itracerep.FuncStats{}
	for _, fn := range rep.Funcs {
		got[fn.Name] = fn
	}
	for _, name := range names {
		w, g := cg[name], got[name]
		if w == nil || g == nil {
			t.Fatalf("%s: callgrind %v, itrace %v", name, w, g)
		}
		if g.Exclusive != w.Self || g.Calls != w.Calls {
			t.Errorf("%-15s itrace: %d instructions, %d calls; callgrind: %d, %d", name, g.Exclusive, g.Calls, w.Self, w.Calls)
		} else {
			t.Logf("%-15s %d instructions, %d calls (= callgrind)", name, g.Exclusive, g.Calls)
		}
	}
}
