package itrace

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	pitrace "perfinsp/libperfutil/itrace"
)

// A read stopped and continued (SIGSTOP/SIGCONT: the kernel restarts it
// without a handler) while traced: the single-step traps it reports after
// the syscall with no instruction run are not counted, so read_raw and its
// callers equal callgrind's counts of the same program (which counts the
// call once; its own run is not stopped: the count is the same).
func TestRestartedReadMatchesCallgrind(t *testing.T) {
	needTool(t, "gcc")
	dir := t.TempDir()
	prog := filepath.Join(dir, "itrace_edge")
	if b, err := exec.Command("gcc", "-O1", "-g", "-fno-inline", "-fno-optimize-sibling-calls", "-no-pie", "-o", prog,
		"../../scripts/vmtest/itrace_edge.c").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, b)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	feed := func() {
		f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err != nil {
			t.Error(err)
			return
		}
		f.WriteString("xy")
		f.Close()
	}
	go feed() // valgrind's run, not stopped (the open waits for the program's)
	cg := callgrind(t, dir, prog, "restart", fifo)

	cmd := startStopped(t, prog, "restart", fifo)
	sink := &capture{}
	tr, err := Start(Options{PIDs: []int{cmd.Process.Pid}, AtExec: true}, sink)
	if err != nil {
		cmd.Process.Kill()
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	inRead := func() {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			sc, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/syscall")
			st, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
			if strings.HasPrefix(string(sc), "0 0x3 ") && strings.Contains(string(st), "S (sleeping)") {
				return
			}
			if time.Now().After(deadline) {
				tr.Stop()
				t.Fatalf("process %d did not block in its read of fd 3", pid)
			}
			time.Sleep(time.Millisecond)
		}
	}
	_ = cmd.Process.Signal(syscall.SIGCONT)
	inRead()
	_ = cmd.Process.Signal(syscall.SIGSTOP) // interrupts the read: restarted
	// until the stop was delivered (the tracer does not keep the process
	// stopped): SIGSTOP no longer pending
	for deadline := time.Now().Add(10 * time.Second); stopPending(pid); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			tr.Stop()
			t.Fatal("SIGSTOP still pending after 10 s")
		}
	}
	_ = cmd.Process.Signal(syscall.SIGCONT)
	inRead()
	feed()
	select {
	case <-tr.Done():
	case <-time.After(120 * time.Second):
		tr.Stop()
		t.Fatal("tracer did not end within 120 s")
	}
	_ = cmd.Wait()
	rep := replay(sink.recs, newELFNamer(t, prog))
	got := map[string]*pitrace.FuncStats{}
	for _, f := range rep.Funcs {
		got[f.Name] = f
	}
	for _, name := range []string{"main", "restart", "read_raw"} {
		w, g := cg[name], got[name]
		if w == nil || g == nil {
			t.Fatalf("%s: callgrind %v, itrace %v", name, w, g)
		}
		if g.Exclusive != w.Self || g.Calls != w.Calls {
			t.Errorf("%-8s itrace: %d instructions, %d calls; callgrind: %d, %d", name, g.Exclusive, g.Calls, w.Self, w.Calls)
		} else {
			t.Logf("%-8s %d instructions, %d calls (= callgrind)", name, g.Exclusive, g.Calls)
		}
	}
}

// stopPending tells whether SIGSTOP is pending for the process.
func stopPending(pid int) bool {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	for _, l := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(l, ":")
		if k == "ShdPnd" || k == "SigPnd" {
			if m, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64); err == nil && m&(1<<(syscall.SIGSTOP-1)) != 0 {
				return true
			}
		}
	}
	return false
}
