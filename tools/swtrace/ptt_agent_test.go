package main

// The PTT holder of the root agent against a --group member: descriptors,
// a target pid that exits and is reused, and processes the kernel would
// not let the member observe.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"perfinsp/internal/daemonproto"
	"perfinsp/internal/tracetest"
	"perfinsp/libperfutil/ptt"
)

// pttEnv builds ptt and the thread helper next to the daemon's binaries.
func pttEnv(t *testing.T) (*secEnv, string) {
	s := setupSec(t)
	build := exec.Command("go", "build", "-o", s.Bin+"/", "./tools/ptt")
	build.Dir = tracetest.Root()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build ptt: %v\n%s", err, out)
	}
	helper := filepath.Join(s.Bin, "threads")
	src := filepath.Join(tracetest.Root(), "tools", "swtrace", "testdata", "threads.c")
	if out, err := exec.Command("gcc", "-O2", "-Wall", "-Werror", "-pthread", "-o", helper, src).CombinedOutput(); err != nil {
		t.Fatalf("build the thread helper: %v\n%s", err, out)
	}
	return s, helper
}

// asNobody returns a command running as uid nobody, in the daemon's group
// when member.
func (s *secEnv) asNobody(member bool, name string, args ...string) *exec.Cmd {
	cred := []string{"--reuid=" + strconv.Itoa(nobody), "--regid=" + strconv.Itoa(nobody), "--clear-groups"}
	if member {
		cred = []string{"--reuid=" + strconv.Itoa(nobody), "--regid=" + strconv.Itoa(s.gid), "--groups=" + strconv.Itoa(s.gid)}
	}
	cmd := exec.Command("setpriv", append(append(cred, name), args...)...)
	cmd.Env = s.Environ
	cmd.Dir = s.pub
	return cmd
}

// ptt runs ptt as the member.
func (s *secEnv) ptt(args ...string) (string, error) {
	out, err := s.asNobody(true, filepath.Join(s.Bin, "ptt"), args...).CombinedOutput()
	return string(out), err
}

func (s *secEnv) pttDump() *ptt.Dump {
	s.T.Helper()
	out, err := s.ptt("dump", "--json")
	if err != nil {
		s.T.Fatalf("ptt dump: %v\n%s", err, out)
	}
	var d ptt.Dump
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		s.T.Fatalf("ptt dump: %v\n%s", err, out)
	}
	return &d
}

func openFDs(t *testing.T, pid int) int {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

func waitUntil(t *testing.T, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

const sixMetrics = "task-clock,cpu-clock,context-switches,cpu-migrations,page-faults,minor-faults"

// ptt on -a takes 7 descriptors per thread of the member's: 3,200 threads
// alive at once stop at the member's bound with the daemon still answering
// root, short threads give their descriptors back when they exit, and the
// dump of all their rows is answered whatever its size.
func TestPttDescriptorsBounded(t *testing.T) {
	s, helper := pttEnv(t)
	pid := s.pid()
	base := openFDs(t, pid)
	if out, err := s.ptt("on", "-a", "-m", sixMetrics); err != nil {
		t.Fatalf("ptt on -a: %v\n%s", err, out)
	}
	defer s.ptt("off")

	// 3,200 threads alive for 4 s at once: 22,400 descriptors wanted.
	cmd := s.asNobody(true, helper, "3200", "3200", "4000")
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if l, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || l != "started\n" {
		t.Fatalf("thread helper: %q %v", l, err)
	}
	peak := 0
	waitUntil(t, "the holder to reach its bound", 20*time.Second, func() bool {
		n := openFDs(t, pid)
		peak = max(peak, n)
		d := s.pttDump()
		t.Logf("daemon descriptors %d, %d rows, errors %v", n, len(d.Threads), d.Errors)
		for _, e := range d.Errors {
			if strings.Contains(e, "threads not counted now") {
				return true
			}
		}
		return false
	})
	s.Sw("info") // root is answered
	if n := openFDs(t, pid); n-base > 9000 {
		t.Fatalf("the daemon holds %d descriptors (%d at start) for one member", n, base)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("thread helper: %v", err)
	}
	// Exited: every thread's descriptors come back.
	waitUntil(t, "the exited threads' descriptors to be closed", 20*time.Second, func() bool { return openFDs(t, pid)-base < 50 })

	// 6,000 short threads, 400 at a time: their descriptors never pile up,
	// and the dump of thousands of exited rows (more than a request may
	// carry) still reaches ptt.
	short := s.asNobody(true, helper, "6000", "400", "300")
	if out, err := short.CombinedOutput(); err != nil {
		t.Fatalf("thread helper: %v %s", err, out)
	}
	waitUntil(t, "the short threads' descriptors to be closed", 20*time.Second, func() bool { return openFDs(t, pid)-base < 50 })
	s.Sw("info")
	d := s.pttDump()
	exited := 0
	for _, th := range d.Threads {
		if th.Exited {
			exited++
		}
	}
	if exited == 0 {
		t.Fatalf("no exited thread in the dump: %d rows, errors %v", len(d.Threads), d.Errors)
	}
	t.Logf("daemon descriptors: %d at start, peak %d; %d rows (%d exited) after 9,200 threads; errors %v", base, peak, len(d.Threads), exited, d.Errors)
}

// busyAt starts the busy process mk returns with pid want, or returns nil
// after many tries (other processes of the machine take pids too).
func busyAt(t *testing.T, want int, mk func() *exec.Cmd) *exec.Cmd {
	for i := 0; i < 200; i++ {
		if err := os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(want-1)), 0); err != nil {
			t.Fatalf("ns_last_pid: %v", err)
		}
		cmd := mk()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if cmd.Process.Pid == want {
			return cmd
		}
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	return nil
}

// ptt on -p PID follows that process only: once it exits, a later process
// given the same pid is not counted for the member, whether root's (which
// the member's credentials could not open either) or the member's own
// (which only the check of the process, not of the pid, refuses).
func TestPttPidReuseNotFollowed(t *testing.T) {
	s, helper := pttEnv(t)
	// The new process runs 20 threads for a second: the holder hears of
	// each at its creation and rescans five times meanwhile.
	t.Run("root's", func(t *testing.T) {
		pidReuse(t, s, func() *exec.Cmd { return exec.Command(helper, "20", "20", "1000") })
	})
	t.Run("member's own", func(t *testing.T) {
		pidReuse(t, s, func() *exec.Cmd { return s.asNobody(true, helper, "20", "20", "1000") })
	})
}

func pidReuse(t *testing.T, s *secEnv, mk func() *exec.Cmd) {
	target := s.asNobody(true, "sleep", "1000")
	if err := target.Start(); err != nil {
		t.Fatal(err)
	}
	pid := target.Process.Pid
	waitUntil(t, "setpriv to exec sleep", 5*time.Second, func() bool {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		return strings.TrimSpace(string(b)) == "sleep"
	})
	if out, err := s.ptt("on", "-p", strconv.Itoa(pid), "-m", "task-clock"); err != nil {
		t.Fatalf("ptt on -p: %v\n%s", err, out)
	}
	defer s.ptt("off")
	_ = target.Process.Kill()
	_ = target.Wait()
	reuse := busyAt(t, pid, mk)
	if reuse == nil {
		t.Fatalf("could not start a process with pid %d again (200 tries)", pid)
	}
	if err := reuse.Wait(); err != nil {
		t.Fatalf("the process given pid %d: %v", pid, err)
	}
	d := s.pttDump()
	for _, th := range d.Threads {
		if th.Pid == pid && th.Tid != pid {
			t.Fatalf("thread %d of the later process given pid %d was counted for the member: %+v", th.Tid, pid, th)
		}
	}
	t.Logf("pid %d reused: not counted; dump errors %v", pid, d.Errors)
}

// The kernel's own rules decide what a member may count: its own process
// made non-dumpable, or one holding a capability, is refused.
func TestPttKernelRulesApply(t *testing.T) {
	s, helper := pttEnv(t)
	for _, c := range []struct {
		name string
		cmd  *exec.Cmd
	}{
		{"non-dumpable", s.asNobody(true, helper, "nodump")},
		// a dumpable process with a capability in its sets
		{"holding cap_sys_nice", exec.Command("setpriv", "--reuid="+strconv.Itoa(nobody), "--regid="+strconv.Itoa(s.gid), "--groups="+strconv.Itoa(s.gid),
			"--inh-caps=+sys_nice", "--ambient-caps=+sys_nice", "sh", "-c", "echo ready; while :; do :; done")},
	} {
		t.Run(c.name, func(t *testing.T) {
			stdout, _ := c.cmd.StdoutPipe()
			if err := c.cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = c.cmd.Process.Kill(); _ = c.cmd.Wait() }()
			if l, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || l != "ready\n" {
				t.Fatalf("helper: %q %v", l, err)
			}
			pid := c.cmd.Process.Pid
			out, err := s.ptt("on", "-p", strconv.Itoa(pid), "-m", "task-clock")
			if err == nil {
				s.ptt("off")
				t.Fatalf("the member counts its %s process %d:\n%s", c.name, pid, out)
			}
			if !strings.Contains(out, "permission denied") {
				t.Fatalf("ptt on -p %s process: want permission denied:\n%s", c.name, out)
			}
		})
	}
}

// pid waits for the daemon's state file (written just after its socket
// appears) and returns the daemon's pid.
func (s *secEnv) pid() int {
	s.T.Helper()
	st := daemonproto.StatePath(filepath.Join(s.Dir, "run", "pitraced.sock"))
	waitUntil(s.T, "the daemon's state file", 10*time.Second, func() bool {
		_, err := os.Stat(st)
		return err == nil
	})
	return daemonPID(s.T, filepath.Join(s.Dir, "run", "pitraced.sock"))
}
