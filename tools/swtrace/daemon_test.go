package main

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"perfinsp/internal/tracetest"
)

// swtrace daemon stop stops the daemon swtrace started, unless it holds a
// trace (then --force does); with none running it says so.
func TestDaemonStop(t *testing.T) {
	e := tracetest.Setup(t)
	gone := func(pid int) bool {
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err != nil {
				return true
			}
			time.Sleep(20 * time.Millisecond)
		}
		return false
	}
	last := func() int {
		pids := e.DaemonPIDs()
		if len(pids) == 0 {
			t.Fatal("no daemon was started")
		}
		return pids[len(pids)-1]
	}
	e.Sw("info") // starts it
	pid := last()
	out := e.Sw("daemon", "stop")
	if !strings.Contains(out, "pitraced (pid "+strconv.Itoa(pid)) || !gone(pid) {
		t.Fatalf("daemon stop: %s; pid %d still runs: %v", out, pid, !gone(pid))
	}
	if out := e.Sw("daemon", "stop"); !strings.Contains(out, "not running") {
		t.Errorf("daemon stop with none running: %q", out)
	}
	e.Sw("on")
	pid = last()
	out, code := e.SwCode("daemon", "stop")
	if code == 0 || !strings.Contains(out, "holds a trace") {
		t.Errorf("daemon stop of a daemon tracing: exit %d, %q", code, out)
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err != nil {
		t.Fatal("the daemon holding a trace was stopped without --force")
	}
	e.Sw("daemon", "stop", "--force")
	if !gone(pid) {
		t.Errorf("daemon stop --force: pid %d still runs", pid)
	}
}
