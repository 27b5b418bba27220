package main

// ITrace against an unprivileged member of the daemon's --group: the
// member's tracer has the member's rights only (setuid programs run
// without their privileges, the kernel refuses what it would refuse the
// member), the member's sessions are bounded, they write only into the
// member's own trace, and the daemon's death lets the traced programs run on.

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// buildC compiles a small C program into the test directory.
func (s *secEnv) buildC(name, src string) string {
	s.T.Helper()
	exe := filepath.Join(s.Dir, name)
	if err := os.WriteFile(exe+".c", []byte(src), 0o644); err != nil {
		s.T.Fatal(err)
	}
	if b, err := exec.Command("gcc", "-O2", "-o", exe, exe+".c").CombinedOutput(); err != nil {
		s.T.Fatalf("gcc: %v\n%s", err, b)
	}
	return exe
}

// startMember starts a command as the member, stopped (SIGSTOP) before it
// runs prog: sh stops itself, then runs script.
func (s *secEnv) startMember(script string, args ...string) (*exec.Cmd, *strings.Builder) {
	s.T.Helper()
	full := append([]string{"--reuid=" + strconv.Itoa(nobody), "--regid=" + strconv.Itoa(s.gid), "--groups=" + strconv.Itoa(s.gid),
		"sh", "-c", "kill -STOP $$; " + script}, args...)
	cmd := exec.Command("setpriv", full...)
	cmd.Dir = s.pub
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		s.T.Fatal(err)
	}
	s.T.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	stat := "/proc/" + strconv.Itoa(cmd.Process.Pid) + "/stat"
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		b, _ := os.ReadFile(stat)
		if f := strings.Fields(string(b)); len(f) > 2 && f[2] == "T" && strings.Contains(string(b), "(sh)") {
			break
		}
		if time.Now().After(deadline) {
			s.T.Fatalf("the member's command did not stop: %s", b)
		}
	}
	return cmd, out
}

// sleepMember starts sleep as the member and waits until it sleeps.
func (s *secEnv) sleepMember() int {
	s.T.Helper()
	cmd := exec.Command("setpriv", "--reuid="+strconv.Itoa(nobody), "--regid="+strconv.Itoa(s.gid), "--groups="+strconv.Itoa(s.gid), "sleep", "60")
	if err := cmd.Start(); err != nil {
		s.T.Fatal(err)
	}
	s.T.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	stat := "/proc/" + strconv.Itoa(cmd.Process.Pid) + "/stat"
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		b, _ := os.ReadFile(stat)
		if f := strings.Fields(string(b)); len(f) > 2 && f[2] == "S" && strings.Contains(string(b), "(sleep)") {
			return cmd.Process.Pid
		}
		if time.Now().After(deadline) {
			s.T.Fatalf("the member's sleep did not start: %s", b)
		}
	}
}

// waitExit waits for cmd within limit.
func waitExit(t *testing.T, cmd *exec.Cmd, limit time.Duration) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(limit):
		_ = cmd.Process.Kill()
		t.Fatalf("the traced program did not end within %v", limit)
		return nil
	}
}

const euidC = `#include <stdio.h>
#include <unistd.h>
int main(void) { printf("euid=%d\n", (int)geteuid()); return 0; }
`

// TestMemberITraceOfSetuidGainsNothing: a member traces its own command
// that execs a setuid-root program (from its first instruction with
// --at-exec, across the exec with -p, in a forked child with -f): the
// program runs without root's rights, so the trace holds no privileged
// execution.
func TestMemberITraceOfSetuidGainsNothing(t *testing.T) {
	s := setupSec(t)
	prog := s.buildC("euid", euidC)
	if err := os.Chmod(prog, os.ModeSetuid|0o755); err != nil {
		t.Fatal(err)
	}
	// Untraced, the program is setuid root here (or this test proves nothing).
	out, err := exec.Command("setpriv", "--reuid="+strconv.Itoa(nobody), "--regid="+strconv.Itoa(nobody), "--clear-groups", prog).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "euid=0" {
		t.Fatalf("the setuid-root copy run by nobody untraced: %v %q (a nosuid file system?)", err, out)
	}
	s.memberOK("init", "-t", "8M")
	s.memberOK("on")
	for _, c := range []struct {
		name   string
		script string
		flags  []string
	}{
		{"at-exec", `exec "$0"`, []string{"--at-exec"}},
		{"across exec", `exec "$0"`, nil},
		{"forked child", `"$0"; exit $?`, []string{"-f"}},
	} {
		cmd, out := s.startMember(c.script, prog)
		pid := strconv.Itoa(cmd.Process.Pid)
		args := append(append([]string{"itrace", "on"}, c.flags...), "-p", pid)
		s.memberOK(args...)
		_ = cmd.Process.Signal(syscall.SIGCONT)
		err := waitExit(t, cmd, 120*time.Second)
		got := strings.TrimSpace(out.String())
		if got == "euid=0" {
			t.Errorf("%s: the traced setuid program ran as root (%v)", c.name, err)
		} else if err != nil || got != "euid="+strconv.Itoa(nobody) {
			t.Errorf("%s: traced program: %v %q, want euid=%d", c.name, err, got, nobody)
		}
		s.member("itrace", "off", "-p", pid)
	}
	s.memberOK("off")
}

// TestMemberITraceSessionsAreBounded: a member's sessions past the per-user
// limit are refused with the limit named, and the daemon serves on.
func TestMemberITraceSessionsAreBounded(t *testing.T) {
	s := setupSec(t)
	s.memberOK("init", "-t", "8M")
	s.memberOK("disable", "tprof")
	s.memberOK("on")
	const limit = 16 // itrace.MaxSessionsPerUser
	var pids []string
	for i := 0; i <= limit; i++ {
		pids = append(pids, strconv.Itoa(s.sleepMember()))
	}
	for _, pid := range pids[:limit] {
		s.memberOK("itrace", "on", "-p", pid)
	}
	s.mustFail("the limit per user", "itrace", "on", "-p", pids[limit])
	out := s.memberOK("itrace", "off")
	if !strings.Contains(out, "16 sessions") {
		t.Fatalf("itrace off: %s", out)
	}
	s.memberOK("itrace", "on", "-p", pids[limit]) // room again
	s.memberOK("off")
	s.Sw("info")
}

// TestITraceOnlyIntoOwnTrace: a member may not add ITrace records to a
// trace root is recording, nor to another member's; the holder may.
func TestITraceOnlyIntoOwnTrace(t *testing.T) {
	s := setupSec(t)
	s.Sw("init", "-t", "8M")
	s.Sw("on")
	pid := strconv.Itoa(s.sleepMember())
	s.mustFail("belongs to uid 0", "itrace", "on", "-p", pid)
	s.Sw("itrace", "on", "-p", pid) // root may
	s.Sw("off")
	s.Sw("free")

	other := func(args ...string) {
		t.Helper()
		if out, code := s.other(args...); code != 0 {
			t.Fatalf("swtrace %v as the other member: exit %d\n%s", args, code, out)
		}
	}
	other("init", "-t", "8M")
	other("on")
	pid = strconv.Itoa(s.sleepMember())
	s.mustFail("belongs to uid 65533", "itrace", "on", "-p", pid)
	other("off")
	other("free")
	s.memberOK("init", "-t", "8M")
	s.memberOK("on")
	s.memberOK("itrace", "on", "-p", pid) // the holder may
	// Another member stops none of the holder's sessions.
	if out, code := s.other("itrace", "off", "-p", pid); code == 0 || !strings.Contains(out, "belongs to another user") {
		t.Fatalf("the other member's itrace off -p of the member's session: exit %d\n%s", code, out)
	}
	_, _ = s.other("itrace", "off")
	if out := s.memberOK("itrace", "off"); !strings.Contains(out, "1 session") {
		t.Fatalf("the member's session after the other member's itrace off: %s", out)
	}
	s.memberOK("off")
}

const loopC = `#include <stdio.h>
int main(int argc, char **argv) {
	volatile unsigned long x = 0;
	for (unsigned long i = 0; i < 200000000UL; i++)
		x += i;
	printf("done %lu\n", x);
	return 0;
}
`

// TestDaemonDeathLeavesTraceesRunning: the daemon killed (SIGKILL) or
// stopped (SIGTERM, a restart) while a member's program is single-stepped:
// the program is let go and finishes with its normal output.
func TestDaemonDeathLeavesTraceesRunning(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			s := setupSec(t)
			prog := s.buildC("loop", loopC)
			s.memberOK("init", "-t", "8M")
			s.memberOK("disable", "tprof")
			s.memberOK("on")
			cmd, out := s.startMember(`exec "$0"`, prog)
			pid := cmd.Process.Pid
			s.memberOK("itrace", "on", "--at-exec", "-p", strconv.Itoa(pid))
			_ = cmd.Process.Signal(syscall.SIGCONT)
			waitRecords(t, s.Env, 2000) // it is being stepped
			sock := filepath.Join(s.Dir, "run", "pitraced.sock")
			if err := syscall.Kill(daemonPID(t, sock), sig); err != nil {
				t.Fatal(err)
			}
			if err := waitExit(t, cmd, 120*time.Second); err != nil {
				t.Fatalf("the traced program after the daemon's %v: %v\n%s", sig, err, out)
			}
			if sc := bufio.NewScanner(strings.NewReader(out.String())); !sc.Scan() || !strings.HasPrefix(sc.Text(), "done ") {
				t.Fatalf("the traced program's output: %q", out)
			}
		})
	}
}
