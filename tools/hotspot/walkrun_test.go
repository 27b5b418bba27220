package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// longRun is how long a walked target is asked to run: far longer than
// any walk of these tests, on any machine. The test ends the run itself
// once the walk is over (runWalk), so nothing depends on the walk's
// length.
const longRun = "600"

// walkDeadline bounds a walk in the tests: a walk that has not written
// its report by then is a failure, not a hang.
const walkDeadline = 5 * time.Minute

// endExampleRun ends the run of the target the report names with SIGUSR1:
// the example (and testdata/sigjmp.c) then prints its line and exits as
// at the end of its time.
func endExampleRun(r Report) error {
	return syscall.Kill(r.PID, syscall.SIGUSR1)
}

// walkExample runs hotspot with args (--json js among them) on a target
// (-- and its command line, running for longRun) through runWalk: its
// output and exit error.
func walkExample(t *testing.T, js string, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	c := exec.Command(tools.hotspot, args...)
	c.Stdout = &out
	err := runWalk(t, c, js, nil, nil)
	return out.String(), err
}

// runWalk waits for c, hotspot with --json js and -- a target running
// for longRun, to finish its walk: once js holds the whole report, end is
// called with it (endExampleRun by default) to end the target's run, and
// hotspot then exits with the target's exit code. meanwhile, if not nil,
// is called every millisecond while hotspot runs (a watch from outside).
// It returns c.Wait's error.
func runWalk(t *testing.T, c *exec.Cmd, js string, end func(Report) error, meanwhile func()) error {
	t.Helper()
	if end == nil {
		end = endExampleRun
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	deadline := time.After(walkDeadline)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	ended := false
	for n := 0; ; n++ {
		select {
		case err := <-done:
			return err
		case <-deadline:
			_ = c.Process.Kill()
			t.Fatalf("hotspot %v: no report in %v", c.Args, walkDeadline)
		case <-tick.C:
		}
		if meanwhile != nil {
			meanwhile()
		}
		if ended || n%20 != 0 {
			continue
		}
		b, err := os.ReadFile(js)
		if err != nil {
			continue
		}
		var r Report
		if json.Unmarshal(b, &r) != nil || r.PID == 0 {
			continue // not yet written whole
		}
		if err := end(r); err != nil {
			t.Errorf("end the target's run: %v", err)
		}
		ended = true
	}
}

// reportRE is the text report's first line (on stderr beside a command).
var reportRE = regexp.MustCompile(`^hotspot: .* \(pid (\d+)\): \d+ samples in `)

// runUntilReported runs c (hotspot beside a command, its text report on
// stderr) and calls reported with the target's pid once the report's
// first line is out — the walk is over — to end the target's run. It
// returns hotspot's stdout, stderr and exit code.
func runUntilReported(t *testing.T, c *exec.Cmd, reported func(pid int)) (string, string, int) {
	t.Helper()
	var o bytes.Buffer
	c.Stdout = &o
	errp, err := c.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	timer := time.AfterFunc(walkDeadline, func() { _ = c.Process.Kill() })
	defer timer.Stop()
	var e strings.Builder
	sc := bufio.NewScanner(errp)
	for sc.Scan() {
		e.WriteString(sc.Text() + "\n")
		if m := reportRE.FindStringSubmatch(sc.Text()); m != nil {
			pid, _ := strconv.Atoi(m[1])
			reported(pid)
		}
	}
	err = c.Wait()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return o.String(), e.String(), code
}
