package events

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

const measureHelperEnv = "EVENTS_MEASURE_HELPER"

// measureHelper counts task-clock on the command in the helper's
// arguments (after "--") and prints the final sample's exit code.
func measureHelper() int {
	args := os.Args
	for i, a := range args {
		if a == "--" {
			args = args[i+1:]
			break
		}
	}
	ev, err := Parse("task-clock")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	err = Measure(Spec{Events: []Event{ev}, Cmd: args}, func(s Sample) error {
		if s.Final {
			fmt.Printf("final exit %d\n", s.ExitCode)
		}
		return nil
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// startMeasure runs measureHelper on a shell script in a process group of
// its own (as a shell runs a job) and waits until the script has written
// ready.
func startMeasure(t *testing.T, dir, script string) (*exec.Cmd, *strings.Builder) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "--", "sh", "-c", script)
	cmd.Env = append(os.Environ(), measureHelperEnv+"=1")
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
	deadline := time.Now().Add(time.Minute)
	for {
		if _, err := os.Stat(filepath.Join(dir, "ready")); err == nil {
			return cmd, out
		}
		if time.Now().After(deadline) {
			t.Fatalf("the command did not start: %s", out)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Ctrl-C at the terminal (SIGINT to the job's process group) reaches the
// command too: the count waits for the command's own end, its clean-up
// runs whole and its exit status is the final sample's (it was sent
// SIGTERM at once, in the middle of its clean-up, and its status lost).
func TestCtrlCLetsTheCommandEnd(t *testing.T) {
	dir := t.TempDir()
	cmd, out := startMeasure(t, dir, `trap 'sleep 0.3; echo done > cleaned; exit 3' INT; touch ready; while :; do sleep 0.01; done`)
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	if b, rerr := os.ReadFile(filepath.Join(dir, "cleaned")); rerr != nil || string(b) != "done\n" {
		t.Errorf("the command's clean-up did not finish (%v); helper: %v\n%s", rerr, err, out)
	}
	if !strings.Contains(out.String(), "final exit 3\n") {
		t.Errorf("the final sample does not carry the command's exit 3: %v\n%s", err, out)
	}
}

// A signal sent to the counter alone is passed on to the command, which
// ends of it: the final sample has its status (128 + SIGINT).
func TestSignalToTheCounterIsPassedOn(t *testing.T) {
	dir := t.TempDir()
	cmd, out := startMeasure(t, dir, `touch ready; while :; do sleep 0.01; done`)
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	if !strings.Contains(out.String(), fmt.Sprintf("final exit %d\n", 128+int(syscall.SIGINT))) {
		t.Errorf("want the command ended by the SIGINT passed on: %v\n%s", err, out)
	}
}
