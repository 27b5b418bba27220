package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// run.hookit --help prints the help on stdout and exits 0; a wrong option
// is one line with a hint.
func TestRunHookitUsage(t *testing.T) {
	r := setup(t)
	out, err := exec.Command(filepath.Join(r, "scripts/run.hookit"), "--help").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "-finstrument-functions") || strings.Contains(string(out), "set -u") {
		t.Errorf("run.hookit --help: %v\n%s", err, out)
	}
	cmd := exec.Command(filepath.Join(r, "scripts/run.hookit"), "--bogus")
	cmd.Dir = t.TempDir()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || strings.Count(stderr.String(), "\n") != 1 || !strings.Contains(stderr.String(), "--help") {
		t.Errorf("run.hookit --bogus: %v\n%s", err, stderr.String())
	}
}

// A program built without -finstrument-functions is refused with the way
// to build it, and no empty report is written.
func TestRunHookitRefusesUninstrumented(t *testing.T) {
	r := setup(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "plain.c")
	prog := filepath.Join(dir, "plain")
	if err := os.WriteFile(src, []byte("int f(int x) { return x + 1; }\nint main(void) { return f(-1); }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-O2", "-o", prog, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	out := filepath.Join(dir, "out")
	cmd := exec.Command(filepath.Join(r, "scripts/run.hookit"), "-o", out, "--", prog)
	msg, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(msg), "rebuild it with -finstrument-functions") {
		t.Errorf("an uninstrumented program: %v\n%s", err, msg)
	}
	if _, err := os.Stat(filepath.Join(out, "log-rt")); err == nil {
		t.Error("an empty report was written")
	}
}

// Ctrl-C (SIGINT to the process group), SIGTERM to run.hookit alone, and
// SIGHUP to the group during the run: the program's stdout is its own, the
// reports are still written, and the exit code is 128+signal.
func TestRunHookitInterrupted(t *testing.T) {
	r := setup(t)
	for _, c := range []struct {
		sig   syscall.Signal
		name  string
		group bool
	}{{syscall.SIGINT, "SIGINT", true}, {syscall.SIGTERM, "SIGTERM", false}, {syscall.SIGHUP, "SIGHUP", true}} {
		runHookitInterrupted(t, r, c.sig, c.name, c.group)
	}
}

func runHookitInterrupted(t *testing.T, r string, sig syscall.Signal, name string, group bool) {
	t.Helper()
	dir := t.TempDir()
	// A hang-up reaches what a terminal started: SIGHUP at its default
	// even when the test inherited it ignored (bash traps no signal
	// ignored at its start).
	cmd := exec.Command("env", "--default-signal=HUP", filepath.Join(r, "scripts/run.hookit"), "-o", dir, "--", filepath.Join(r, "bin/callflow"), "spin")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("%s: the program's first line on run.hookit's stdout: %q, %v\n%s", name, line, err, stderr.String())
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	target := cmd.Process.Pid
	if group {
		target = -target
	}
	if err := syscall.Kill(target, sig); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("run.hookit did not end after %s\n%s", name, stderr.String())
	}
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 128+int(sig) {
		t.Errorf("%s: exit %v, want %d\n%s", name, err, 128+int(sig), stderr.String())
	}
	if !strings.Contains(stderr.String(), "interrupted by "+name) {
		t.Errorf("%s: no line saying it was interrupted:\n%s", name, stderr.String())
	}
	if rt, err := os.ReadFile(filepath.Join(dir, "log-rt")); err != nil || !bytes.Contains(rt, []byte("callflow")) {
		t.Errorf("%s: no log-rt of the interrupted run: %v\n%.500s", name, err, rt)
	}
}

// The program's stdout is its own: run.hookit's report lines go to stderr.
func TestRunHookitStdout(t *testing.T) {
	r := setup(t)
	dir := t.TempDir()
	src, prog := filepath.Join(dir, "say.c"), filepath.Join(dir, "say")
	if err := os.WriteFile(src, []byte("#include <stdio.h>\nstatic int sq(int x) { return x * x; }\nint main(void) { for (int i = 0; i < 5; i++) printf(\"%d\\n\", sq(i)); return 0; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-O0", "-finstrument-functions", "-o", prog, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	want, err := exec.Command(prog).Output()
	if err != nil || len(want) == 0 {
		t.Fatalf("say: %v %q", err, want)
	}
	cmd := exec.Command(filepath.Join(r, "scripts/run.hookit"), "-o", filepath.Join(dir, "out"), "--", prog)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("run.hookit: %v\n%s", err, stderr.String())
	}
	if !bytes.Equal(stdout.Bytes(), want) {
		t.Errorf("run.hookit's stdout is not the program's own:\n%q\nwant:\n%q", stdout.String(), want)
	}
	if !strings.Contains(stderr.String(), "hookit: pid ") {
		t.Errorf("the report line is not on stderr:\n%s", stderr.String())
	}
}

// childOf is the one child process of pid (run.hookit's program), from
// /proc; 0 when there is none.
func childOf(pid int) int {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	f := strings.Fields(string(b))
	if len(f) != 1 {
		return 0
	}
	n, _ := strconv.Atoi(f[0])
	return n
}

// kill -9 of the program: run.hookit exits with its 137, writes the
// reports of what it ran, and shows no line of its own internals (bash's
// "line N: PID Killed ...").
func TestRunHookitProgramKilled(t *testing.T) {
	r := setup(t)
	dir := t.TempDir()
	cmd := exec.Command(filepath.Join(r, "scripts/run.hookit"), "-o", dir, "--", filepath.Join(r, "bin/callflow"), "spin")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("the program's first line on run.hookit's stdout: %q, %v\n%s", line, err, stderr.String())
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	prog := childOf(cmd.Process.Pid)
	if prog == 0 {
		t.Fatal("run.hookit has no one child process running the program")
	}
	if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", prog)); string(comm) != "callflow\n" {
		t.Fatalf("run.hookit's child %d is %q, not the program", prog, comm)
	}
	if err := syscall.Kill(prog, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("run.hookit did not end after its program was killed\n%s", stderr.String())
	}
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 137 {
		t.Errorf("exit: %v, want the program's 137\n%s", err, stderr.String())
	}
	if regexp.MustCompile(`line \d+: +\d+ Killed`).MatchString(stderr.String()) {
		t.Errorf("the wrapper's internals are shown:\n%s", stderr.String())
	}
	if rt, err := os.ReadFile(filepath.Join(dir, "log-rt")); err != nil || !bytes.Contains(rt, []byte("callflow")) {
		t.Errorf("no log-rt of the killed program: %v\n%.500s", err, rt)
	}
}
