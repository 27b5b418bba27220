package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"perfinsp/analysis/callflow"
)

// Signals whose handler runs instrumented code, sent to each new thread
// from its creation until it is joined (testdata/sigopen.c): they reach
// the thread while its first hook event opens its files and while it
// exits. Without DIR the first event is a handler's and the exit is the
// window that matters: PTT's thread-exit destructor unmapped the
// thread's counter page while a handler's hook could still read it
// (the program died of SIGSEGV). With DIR the signals start once the
// thread's file exists, so its first event (body's entry) is opening the
// files: a handler's hook then opened them a second time and waited for
// ever on the lock the first opening held (the program hung). Each run
// must end by itself with the program's output and the reports; the
// deadline only turns a hang into a failure.
func TestSignalHandlersWhileThreadsOpenAndExit(t *testing.T) {
	const n = 40
	r := setup(t)
	prog := filepath.Join(t.TempDir(), "sigopen")
	if out, err := exec.Command("gcc", "-O1", "-finstrument-functions", "-pthread", "-o", prog, "testdata/sigopen.c").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	for _, withDir := range []bool{false, true} {
		t.Run(fmt.Sprintf("dir=%v", withDir), func(t *testing.T) {
			dir := t.TempDir()
			args := []string{"-o", dir, "--", prog, fmt.Sprint(n)}
			if withDir {
				args = append(args, dir)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, filepath.Join(r, "scripts/run.hookit"), args...)
			// a hung program is killed with run.hookit: the whole group
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
			cmd.WaitDelay = 10 * time.Second
			out, err := cmd.CombinedOutput()
			if ctx.Err() != nil {
				t.Fatalf("run.hookit did not end (the program hung):\n%s", out)
			}
			if err != nil {
				t.Fatalf("run.hookit: %v\n%s", err, out)
			}
			var threads, handled int
			if _, err := fmt.Sscanf(string(out), "%d threads, %d signals handled", &threads, &handled); err != nil || threads != n {
				t.Fatalf("program said %q", out)
			}
			p := load(t, dir)
			if len(p.Threads) != n+1 {
				t.Errorf("%d threads in the files, want %d", len(p.Threads), n+1)
			}
			var body, inHandler uint64
			for _, tr := range callflow.Analyze(p).Trees {
				tr.Root.Walk(func(nd *callflow.Node) {
					switch nd.Name {
					case "body":
						body += nd.Calls
					case "in_handler":
						inHandler += nd.Calls
					}
				})
			}
			if body != n || inHandler > uint64(handled) {
				t.Errorf("body %d calls (want %d), in_handler %d (at most the %d the program counted)", body, n, inHandler, handled)
			}
			// A handler's run is recorded whole or dropped whole (its four
			// events: handler's and in_handler's entries and exits), and
			// the reports say how many events were dropped.
			if d := p.Info.Dropped; d%4 != 0 || inHandler+d/4 != uint64(handled) {
				t.Errorf("%d handler runs, %d recorded, %d events dropped: want the runs not recorded dropped, 4 events each", handled, inHandler, d)
			}
			if logRT, err := os.ReadFile(filepath.Join(dir, "log-rt")); err != nil {
				t.Error(err)
			} else if p.Info.Dropped > 0 && !bytes.Contains(logRT, []byte(fmt.Sprintf(" DROPPED: %d events not recorded", p.Info.Dropped))) {
				t.Errorf("log-rt does not say that %d events were dropped", p.Info.Dropped)
			}
			t.Logf("%d signals handled, %d handler runs recorded, %d events dropped", handled, inHandler, p.Info.Dropped)
		})
	}
}
