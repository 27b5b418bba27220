package itrace

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A read stopped and continued (SIGSTOP/SIGCONT: the kernel restarts it
// without a handler) while traced: the single-step traps it reports after
// the syscall with no instruction run are not counted, so read_raw and its
// callers equal callgrind's counts of the same program (which counts the
// call once; its own run is not stopped: the count is the same).
func TestRestartedReadMatchesCallgrind(t *testing.T) {
	dir := t.TempDir()
	prog := buildEdge(t, dir)
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
	inRead := func() { t.Helper(); waitInRead(t, pid, func() { tr.Stop() }) }
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
	waitTracerDone(t, tr)
	_ = cmd.Wait()
	expectCallgrindCounts(t, cg, sink.recs, prog, "main", "restart", "read_raw")
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
