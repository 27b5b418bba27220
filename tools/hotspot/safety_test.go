package main

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// startGosort starts testdata/gosort (built into dir) and waits until its
// workers run; closing the returned writer ends it.
func startGosort(t *testing.T, prog string) (*exec.Cmd, io.WriteCloser, *bytes.Buffer) {
	t.Helper()
	var out bytes.Buffer
	c := exec.Command(prog)
	c.Stdout = &out
	in, err := c.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	errp, err := c.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Process.Kill() })
	sc := bufio.NewScanner(errp)
	if !sc.Scan() || sc.Text() != "gosort: running" {
		t.Fatalf("gosort did not start: %q %v", sc.Text(), sc.Err())
	}
	go func() { _, _ = io.Copy(io.Discard, errp) }()
	return c, in, &out
}

// TestGoTargetSurvives walks a running Go program (goroutines sorting
// strings, built here) with -p: Go code is sampled and named, never
// probed (its runtime walks, copies and moves goroutine stacks between
// threads). The program must run to its normal end with its output
// unchanged, its hot functions marked as Go code, and no probe placed.
func TestGoTargetSurvives(t *testing.T) {
	build(t)
	prog := filepath.Join(t.TempDir(), "gosort")
	if out, err := exec.Command("go", "build", "-o", prog, "./testdata/gosort").CombinedOutput(); err != nil {
		t.Fatalf("build testdata/gosort: %v\n%s", err, out)
	}
	// The reference: the same program, not walked.
	ref, in, refOut := startGosort(t, prog)
	in.Close()
	if err := ref.Wait(); err != nil {
		t.Fatalf("gosort alone: %v", err)
	}
	target, in, out := startGosort(t, prog)
	js := filepath.Join(t.TempDir(), "r.json")
	tool := exec.Command(tools.hotspot, "-q", "-p", strconv.Itoa(target.Process.Pid), "-s", "1", "--top", "2",
		"--period", "1s", "--depth", "3", "--max-overhead", "0", "--json", js, "-o", os.DevNull)
	msg, err := tool.CombinedOutput()
	if err != nil {
		t.Fatalf("hotspot: %v\n%s", err, msg)
	}
	in.Close()
	if err := target.Wait(); err != nil {
		t.Fatalf("the Go target after the walk: %v (want its normal exit 0)", err)
	}
	if out.String() != refOut.String() || !strings.Contains(out.String(), "every round alike: true") {
		t.Fatalf("the Go target's output %q, want %q as when not walked", out.String(), refOut.String())
	}
	r := readReport(t, js)
	goHot := 0
	for _, f := range r.Hot {
		if f.Path != prog {
			continue
		}
		goHot++
		if !strings.Contains(f.NoProbe, "Go code") {
			t.Errorf("hot Go function %+v not marked as Go code", f)
		}
	}
	if goHot == 0 {
		t.Errorf("hot %+v: want the program's Go functions among them", r.Hot)
	}
	if r.HookHits != 0 || len(r.Funcs) != 0 {
		t.Errorf("%d probe hits, instrumented %+v: want no probe in Go code", r.HookHits, r.Funcs)
	}
}

var sigjmpRE = regexp.MustCompile(`^sigjmp: direct=(\d+) jumped=(\d+) handler=(\d+) sum=\d+\n$`)

// TestSigaltstackAndLongjmpTarget walks a C program whose hot function is
// called normally, from a function left by longjmp, and from a SIGPROF
// handler on an alternate stack above the interrupted calls' stack (where
// a uretprobe's pending return is dropped by the kernel, which then kills
// the program with SIGILL). The program must end normally; the walk finds
// the three callers, pairs the calls that return, and counts the one left
// by longjmp as left unseen rather than timing it.
func TestSigaltstackAndLongjmpTarget(t *testing.T) {
	build(t)
	prog := filepath.Join(t.TempDir(), "sigjmp")
	if out, err := exec.Command("gcc", "-O2", "-g", "-fno-omit-frame-pointer", "-fno-optimize-sibling-calls", "-Wall", "-Werror", "-o", prog, "testdata/sigjmp.c").CombinedOutput(); err != nil {
		t.Fatalf("build testdata/sigjmp.c: %v\n%s", err, out)
	}
	js := filepath.Join(t.TempDir(), "r.json")
	c := exec.Command(tools.hotspot, "-q", "-s", "1", "--period", "1s", "--depth", "3", "--max-overhead", "0", "--json", js, "-o", os.DevNull, "--", prog, longRun)
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	err := runWalk(t, c, js, nil, nil)
	out := stdout.String()
	if err != nil {
		t.Fatalf("hotspot -- sigjmp: %v (want the program's exit 0); output %q\n%s", err, out, stderr.String())
	}
	m := sigjmpRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("output %q: want the program's one line", out)
	}
	direct, _ := strconv.Atoi(m[1])
	jumped, _ := strconv.Atoi(m[2])
	if jumped != direct && jumped != direct+1 {
		t.Errorf("direct=%d jumped=%d: every longjmp must come back once", direct, jumped)
	}
	r := readReport(t, js)
	funcs := map[string]*FuncStat{}
	for _, f := range r.Funcs {
		funcs[f.Name] = f
		t.Logf("level %d %s: %d exit probes (%s), %d calls, %d pairs, mean %.0f ns, %d left unseen, %d cut, callers %v", f.Level, f.Name, f.ExitProbes, f.ExitsNote, f.Calls, f.Returns, f.MeanNs, f.NoExit, f.Cut, callerShares(f))
	}
	hot := funcs["hot"]
	if hot == nil || hot.Level != 0 || hot.Returns == 0 || hot.ExitProbes == 0 {
		t.Fatalf("hot %+v: want it instrumented in level 0 with its calls paired", hot)
	}
	sh := callerShares(hot)
	if sh["direct"] == 0 || sh["leap"] == 0 || sh["on_prof"] == 0 {
		t.Errorf("hot's callers %v: want direct, leap and the signal handler on_prof", sh)
	}
	leap := funcs["leap"]
	if leap == nil || leap.Calls == 0 || leap.Returns != 0 || leap.ExitsNote == "" {
		t.Errorf("leap %+v: want calls seen, none timed, and why (it leaves by longjmp only)", leap)
	}
	if j := funcs["jumped"]; j == nil || j.Returns == 0 || j.Returns+j.Cut+j.NoExit < j.Calls || j.NoExit*10 > j.Calls {
		t.Errorf("jumped %+v: want its calls paired across the longjmp below it", j)
	}
}
