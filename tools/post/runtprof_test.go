package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"perfinsp/format/nrm2"
	"perfinsp/format/trace"
	"perfinsp/internal/testenv"
	"perfinsp/internal/tracetest"
)

// TestRunTprof drives scripts/run.tprof with the tools built from this tree.
func TestRunTprof(t *testing.T) {
	// The tools built for the test, and the scripts beside them (they run
	// the tools of their own tree: ../bin); nothing is built into this
	// tree, and the agent of the test's socket is stopped at its end.
	e := tracetest.Setup(t, "./tools/post")
	root, dir, burn, env := e.Dir, t.TempDir(), e.Burn, e.Environ
	if err := os.MkdirAll(filepath.Join(root, "scripts"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"run.tprof", "runlib.sh"} {
		b, err := os.ReadFile(filepath.Join(tracetest.Root(), "scripts", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "scripts", f), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	testenv.OpenPathTo(t, filepath.Join(root, "scripts")) // run as nobody below
	script := filepath.Join(root, "scripts", "run.tprof")
	runIt := func(args ...string) (string, int) {
		c := exec.Command(script, args...)
		c.Env, c.Dir = env, dir
		out, err := c.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}
	out, code := runIt("--", burn, "100")
	if code != 0 {
		t.Fatalf("run.tprof: exit %d\n%s", code, out)
	}
	if !strings.Contains(out, "heavy") || !strings.Contains(out, "top modules and symbols") {
		t.Fatalf("run.tprof did not print the top rows:\n%s", out)
	}
	for _, f := range []string{"swtrace.nrm2", "tprof.out"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Fatalf("%s not left in the current directory", f)
		}
	}
	if out, code := runIt("--", "sh", "-c", "exit 7"); code != 7 {
		t.Fatalf("the command's exit code 7 was not preserved: %d\n%s", code, out)
	}
	// The report covers the command's process tree, not a busy neighbour;
	// -a covers the whole system.
	busy := exec.Command("sh", "-c", "while :; do :; done")
	if err := busy.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = busy.Process.Kill(); _ = busy.Wait() }()
	busyRow := regexp.MustCompile(`(?m)^PID .*_` + strconv.Itoa(busy.Process.Pid) + `$`)
	mine := filepath.Join(dir, "mine")
	if out, code := runIt("-o", mine, "--", burn, "60"); code != 0 {
		t.Fatalf("run.tprof with a busy neighbour: exit %d\n%s", code, out)
	}
	rep, _ := os.ReadFile(filepath.Join(mine, "tprof.out"))
	if busyRow.Match(rep) || !strings.Contains(string(rep), "Selected") || !strings.Contains(string(rep), "cpuburn") {
		t.Fatalf("run.tprof -- cmd reports more than the command's processes:\n%s", rep)
	}
	whole := filepath.Join(dir, "whole")
	if out, code := runIt("-a", "-o", whole, "--", burn, "60"); code != 0 {
		t.Fatalf("run.tprof -a: exit %d\n%s", code, out)
	}
	rep, _ = os.ReadFile(filepath.Join(whole, "tprof.out"))
	if !busyRow.Match(rep) {
		t.Fatalf("run.tprof -a lacks the busy process %d:\n%s", busy.Process.Pid, rep)
	}
	_ = busy.Process.Kill()
	// A buffer that fills: the trace is still written and posted, the
	// command's exit code kept, and the user told which -t would do.
	swtrace := func(args ...string) {
		c := exec.Command(filepath.Join(root, "bin", "swtrace"), args...)
		c.Env, c.Dir = env, dir
		if o, err := c.CombinedOutput(); err != nil {
			t.Fatalf("swtrace %v: %v %s", args, err, o)
		}
	}
	swtrace("enable", "dispatch") // left over from earlier work: must not leak into run.tprof
	small := filepath.Join(dir, "small")
	out, code = runIt("-t", "16K", "-o", small, "--", "sh", "-c", burn+" 100 >/dev/null; exit 5")
	if code != 5 {
		t.Fatalf("a full buffer: exit %d, want the command's 5\n%s", code, out)
	}
	if !strings.Contains(out, "tracing stopped early") || !regexp.MustCompile(`-t \d+M would have held it`).MatchString(out) {
		t.Fatalf("a full buffer is not reported with a -t that would do:\n%s", out)
	}
	f, err := nrm2.Open(filepath.Join(small, "swtrace.nrm2"))
	if err != nil {
		t.Fatalf("the trace of a full buffer was not written: %v", err)
	}
	ticks, dispatch := 0, 0
	_ = f.Records(func(r *trace.Record) error {
		switch r.Major {
		case trace.MajorTprof:
			ticks++
		case trace.MajorDispatch:
			dispatch++
		}
		return nil
	})
	if ticks == 0 || dispatch != 0 {
		t.Fatalf("full-buffer trace: %d ticks, %d dispatch records (earlier swtrace enable leaked)", ticks, dispatch)
	}
	if _, err := os.Stat(filepath.Join(small, "tprof.out")); err != nil {
		t.Fatal("no tprof.out after a full buffer")
	}
	// A command that does not exist: nothing traced, exit 127.
	none := filepath.Join(dir, "none")
	out, code = runIt("-o", none, "--", "no-such-command-perfinsp")
	if code != 127 || !strings.Contains(out, "command not found") {
		t.Fatalf("missing command: exit %d\n%s", code, out)
	}
	if _, err := os.Stat(filepath.Join(none, "swtrace.nrm2")); err == nil {
		t.Fatal("a missing command was traced")
	}
	// -s: continuous mode, any length fits.
	sys := filepath.Join(dir, "sys")
	out, code = runIt("-s", "1", "-o", sys)
	if code != 0 || !strings.Contains(out, "continuous mode") {
		t.Fatalf("-s 1: exit %d\n%s", code, out)
	}
	if f, err := nrm2.Open(filepath.Join(sys, "swtrace.nrm2")); err != nil || f.Header.Mode != nrm2.ModeCont {
		t.Fatalf("-s 1 trace: %v", err)
	}
	if out, code := runIt(); code == 0 || !strings.Contains(out, "give a command") {
		t.Fatalf("no command: exit %d\n%s", code, out)
	}
	// Busy: somebody else is tracing.
	sw := exec.Command(filepath.Join(root, "bin", "swtrace"), "on", "--discard")
	sw.Env, sw.Dir = env, dir
	if o, err := sw.CombinedOutput(); err != nil {
		t.Fatalf("swtrace on: %v %s", err, o)
	}
	out, code = runIt("--", "true")
	if code == 0 || !strings.Contains(out, "busy") {
		t.Fatalf("busy facility: exit %d\n%s", code, out)
	}
	off := exec.Command(filepath.Join(root, "bin", "swtrace"), "off")
	off.Env = env
	off.Run()
	// Not root.
	np := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", script, "--", "true")
	np.Env = env
	o, err := np.CombinedOutput()
	if err == nil || !strings.Contains(string(o), "needs root") {
		t.Fatalf("non-root: %v\n%s", err, o)
	}
}
