package jprof_test

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"perfinsp/internal/tracetest"
)

// agentOnly builds what the calltree tests need (no root: the call-flow
// runtime reads per-thread counters of the JVM's own threads).
func agentOnly(t *testing.T) string {
	t.Helper()
	need(t, "java", "javac")
	root := tracetest.Root()
	mk := exec.Command("make", "--no-print-directory", "jprof")
	mk.Dir = root
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("make jprof: %v\n%s", err, out)
	}
	gob := exec.Command("go", "build", "-o", filepath.Join(root, "bin")+"/", "./tools/hookit", "./tools/rtdriver")
	gob.Dir = root
	if out, err := gob.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return root
}

func java(root, dir, opts string, args ...string) *exec.Cmd {
	a := []string{"-agentpath:" + filepath.Join(root, "bin", "libjprof.so") + "=" + opts,
		"-Djprofdemo.lib=" + filepath.Join(root, "build", "java", "libjprofdemo.so"),
		"-cp", filepath.Join(root, "build", "java")}
	c := exec.Command("java", append(a, args...)...)
	c.Dir = dir
	return c
}

// logRow is one node of log-rt.
type logRow struct {
	lv                 int
	calls, base, delta int64
	name               string
}

var logRE = regexp.MustCompile(`^\s*(\d+)\s+(\d+)\s+(\d+)\s+(-?\d+)\s+(-?\d+)\s+\S+\s+\S+\s+(.*)$`)

// report runs hookit report on dir and returns log-rt's rows per thread.
func report(t *testing.T, root, dir string, args ...string) (map[string][]logRow, string) {
	t.Helper()
	rep := exec.Command(filepath.Join(root, "bin", "hookit"), append([]string{"report", "-i", dir}, args...)...)
	if out, err := rep.CombinedOutput(); err != nil {
		t.Fatalf("hookit report: %v\n%s", err, out)
	}
	return readLogRT(t, dir)
}

// readLogRT returns the rows of dir/log-rt per thread, and its text.
func readLogRT(t *testing.T, dir string) (map[string][]logRow, string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "log-rt"))
	if err != nil {
		t.Fatal(err)
	}
	threads := map[string][]logRow{}
	cur := ""
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "Thread ") {
			cur = strings.Fields(l)[1]
			continue
		}
		m := logRE.FindStringSubmatch(l)
		if m == nil || cur == "" || strings.HasPrefix(m[6], "(") {
			continue
		}
		r := logRow{name: strings.TrimSpace(m[6])}
		r.lv, _ = strconv.Atoi(m[1])
		r.calls, _ = strconv.ParseInt(m[2], 10, 64)
		r.base, _ = strconv.ParseInt(m[4], 10, 64)
		r.delta, _ = strconv.ParseInt(m[5], 10, 64)
		threads[cur] = append(threads[cur], r)
	}
	return threads, string(b)
}

// The bundled example under calltree: the call counts of every method are
// exact in log-rt (recursion, an exception thrown through two frames, a
// native method, a method interpreted then compiled, a second thread); the
// exception path repairs the stack (what main calls after catcher() is
// main's child again); the empty method's calibrated BASE is about 0
// (sequence minima by method type and transition).
func TestCalltreeDemo(t *testing.T) {
	root := agentOnly(t)
	dir := t.TempDir()
	c := java(root, dir, "calltree,include=JProfDemo*,dir="+dir, "JProfDemo")
	if out, err := c.CombinedOutput(); err != nil || !strings.Contains(string(out), "JProfDemo done") {
		t.Fatalf("java: %v\n%s", err, out)
	}
	threads, text := report(t, root, dir, "--cal", "minima", "--chrome")
	if len(threads) != 2 {
		t.Fatalf("%d threads in log-rt, want main and worker:\n%s", len(threads), text)
	}
	calls := map[string]int64{}
	var mainRows []logRow
	for _, rows := range threads {
		for _, r := range rows {
			calls[r.name] += r.calls
		}
		if rows[0].name == "JProfDemo.main" {
			mainRows = rows
		}
	}
	want := map[string]int64{"JProfDemo.main": 1, "JProfDemo.fib": 465, "JProfDemo.empty": 1000, "JProfDemo.catcher": 3,
		"JProfDemo.thrower": 6, "JProfDemo.nativeAdd": 7, "JProfDemo.hot": 30000, "JProfDemo.work": 5}
	for _, r := range mainRows {
		if r.name == "JProfDemo.work" {
			t.Error("work() in main's thread, want it in the worker thread only")
		}
	}
	for n, w := range want {
		if calls[n] != w {
			t.Errorf("%s: %d calls, want %d", n, calls[n], w)
		}
	}
	// main's direct children at level 2, in order; thrower only below catcher.
	var kids []string
	var empty logRow
	for _, r := range mainRows {
		if r.lv == 2 && !strings.Contains(r.name, "Lambda") {
			kids = append(kids, r.name)
		}
		if r.name == "JProfDemo.thrower" && r.lv != 3 && r.lv != 4 {
			t.Errorf("thrower at level %d, want 3 and 4 (below catcher)", r.lv)
		}
		if r.name == "JProfDemo.empty" {
			empty = r
		}
	}
	if got := strings.Join(kids, " "); got != "JProfDemo.fib JProfDemo.empty JProfDemo.catcher JProfDemo.nativeAdd JProfDemo.hot" {
		t.Errorf("main's children %q: the exception path did not repair the stack\n%s", got, text)
	}
	// empty()'s calibrated BASE: preemption and interrupts inside its
	// calls (a loaded machine) raise what the minima cannot remove, so a
	// run over the limit is repeated, up to three in all, each logged; a
	// calibration that does not work fails all three.
	for attempt := 1; ; attempt++ {
		raw := empty.base + empty.delta
		t.Logf("empty(), run %d: %d calls, BASE %d (%.1f per call), raw %d (%.1f per call)", attempt, empty.calls, empty.base,
			float64(empty.base)/float64(empty.calls), raw, float64(raw)/float64(empty.calls))
		if empty.calls == 1000 && raw > 0 && 3*empty.base <= raw {
			break
		}
		if attempt == 3 {
			t.Errorf("empty(): calibrated BASE %d of raw %d: not about 0", empty.base, raw)
			break
		}
		empty = logRow{}
		dir := t.TempDir()
		c := java(root, dir, "calltree,include=JProfDemo*,dir="+dir, "JProfDemo")
		if out, err := c.CombinedOutput(); err != nil || !strings.Contains(string(out), "JProfDemo done") {
			t.Fatalf("java: %v\n%s", err, out)
		}
		threads, _ := report(t, root, dir, "--cal", "minima", "--chrome")
		for _, rows := range threads {
			for _, r := range rows {
				if r.name == "JProfDemo.empty" {
					empty = r
				}
			}
		}
	}
	for _, f := range []string{"log-gen", "callflow.pb.gz", "callflow.folded", "callflow.trace.json"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("report %s missing or empty: %v", f, err)
		}
	}
}

// The agent survives rtdriver commands in any order on a running JVM
// started with start=off: nothing is recorded before start, calls after.
func TestCalltreeRtdriver(t *testing.T) {
	root := agentOnly(t)
	dir := t.TempDir()
	c := java(root, dir, "calltree,start=off,include=JProfDemo*,dir="+dir, "JProfDemo", "wait")
	stdin, _ := c.StdinPipe()
	stdout, _ := c.StdoutPipe()
	c.Stderr = os.Stderr
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	defer c.Process.Kill()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "pid ") {
		t.Fatalf("no pid line: %q %v", line, err)
	}
	go io.Copy(io.Discard, stdout)
	pid := strings.TrimSpace(strings.TrimPrefix(line, "pid "))
	rt := func(cmd string) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for {
			out, err := exec.Command(filepath.Join(root, "bin", "rtdriver"), "-d", dir, "-p", pid, cmd).CombinedOutput()
			if err == nil {
				return
			}
			// the control socket appears once the runtime is up
			if time.Now().After(deadline) || !strings.Contains(string(out), "connect") {
				t.Fatalf("rtdriver %s: %v\n%s", cmd, err, out)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	for _, cmd := range []string{"end", "flush", "reset", "start", "start", "flush", "end", "reset", "start", "flush", "reset", "end", "start"} {
		rt(cmd)
	}
	// The report counts from the last reset: shut down once the running
	// JVM has recorded hot() calls since the last start (beside a busy
	// job its thread may not run between two rtdriver commands).
	hotCalls := func(threads map[string][]logRow) (n int64) {
		for _, rows := range threads {
			for _, r := range rows {
				if r.name == "JProfDemo.hot" {
					n += r.calls
				}
			}
		}
		return n
	}
	for deadline := time.Now().Add(time.Minute); ; {
		rt("flush")
		if threads, _ := report(t, root, dir); hotCalls(threads) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	rt("shutdown")
	// after shutdown: the JVM goes on; the commands have nothing to act on
	_, _ = exec.Command(filepath.Join(root, "bin", "rtdriver"), "-d", dir, "-p", pid, "start").CombinedOutput()
	stdin.Close()
	if err := c.Wait(); err != nil {
		t.Fatalf("java: %v", err)
	}
	threads, text := report(t, root, dir)
	if hotCalls(threads) == 0 {
		t.Errorf("no hot() calls recorded between start and shutdown:\n%s", text)
	}
}

// A JVM that exits (System.exit) with a thread still calling methods, and
// a JVM that unloads a class, run to the end under the agent, and their
// records are reported.
func TestCalltreeExitAndUnload(t *testing.T) {
	root := agentOnly(t)
	for _, tc := range []struct {
		mode string
		code int
		want string
	}{{"exit", 3, "JProfDemo.hot"}, {"unload", 0, "Unloadable.call"}} {
		dir := t.TempDir()
		c := java(root, dir, "calltree,dir="+dir, "-Xlog:class+unload", "JProfDemo", tc.mode)
		out, err := c.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != tc.code {
			t.Fatalf("%s: exit %d, want %d\n%s", tc.mode, code, tc.code, out)
		}
		if tc.mode == "unload" && !strings.Contains(string(out), "unloading class Unloadable") {
			t.Fatalf("Unloadable was not unloaded:\n%s", out)
		}
		if m, _ := filepath.Glob(filepath.Join(dir, "hs_err*")); len(m) > 0 {
			t.Fatalf("%s: the JVM crashed: %v", tc.mode, m)
		}
		threads, text := report(t, root, dir)
		found := false
		for _, rows := range threads {
			for _, r := range rows {
				if r.name == tc.want && r.calls > 0 {
					found = true
				}
			}
		}
		if !found {
			t.Errorf("%s: no calls of %s in log-rt:\n%.3000s", tc.mode, tc.want, text)
		}
	}
}

// Bad options stop the JVM at start with a message saying what to use.
func TestBadOptions(t *testing.T) {
	root := agentOnly(t)
	for _, opts := range []string{"", "bogus", "tprof,calltree", "tprof,trace", "calltree,dir=/proc/nonexistent",
		"lock,trace", "wall=0", "wall=x", "wall=60001", "sig,verbose"} {
		out, err := java(root, t.TempDir(), opts, "HotLoop", "0").CombinedOutput()
		if err == nil {
			t.Errorf("options %q accepted:\n%s", opts, out)
			continue
		}
		if !strings.Contains(string(out), "jprof: ") {
			t.Errorf("options %q: no jprof message:\n%s", opts, out)
		}
	}
}

// The calltree's directory must be the user's own and closed to others:
// a world-writable one, with links planted under the names of the files,
// stops the JVM at start with the runtime's reason, and nothing is
// written there or through the links.
func TestCalltreeSharedDirectoryRefused(t *testing.T) {
	root := agentOnly(t)
	base := t.TempDir()
	dir := filepath.Join(base, "shared")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(base, "victim")
	if err := os.WriteFile(victim, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(dir, "log-rt")); err != nil {
		t.Fatal(err)
	}
	out, err := java(root, base, "calltree,include=JProfDemo*,dir="+dir, "JProfDemo").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "jprof: ") || !strings.Contains(string(out), "is writable by others") {
		t.Fatalf("a world-writable calltree directory: %v\n%s", err, out)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "hookit-*")); len(m) != 0 {
		t.Fatalf("files written in the shared directory: %v", m)
	}
	if b, _ := os.ReadFile(victim); string(b) != "precious" {
		t.Fatalf("the victim was written: %q", b)
	}
}

// PI's reports are written when the JVM ends, without another command:
// log-rt (JProfDemo's exact call counts), log-gen, the pprof and folded
// forms, in dir=; the program's stdout is its own. report=off leaves the
// raw thread files only.
func TestCalltreeReportsAtExit(t *testing.T) {
	root := agentOnly(t)
	dir := t.TempDir()
	c := java(root, dir, "calltree,dir="+dir, "JProfDemo")
	var stdout, stderr strings.Builder
	c.Stdout, c.Stderr = &stdout, &stderr
	if err := c.Run(); err != nil {
		t.Fatalf("JProfDemo: %v\n%s", err, stderr.String())
	}
	if strings.Contains(stdout.String(), "hookit") {
		t.Errorf("the report's messages went to the program's stdout:\n%s", stdout.String())
	}
	for _, f := range []string{"log-rt", "log-gen", "callflow.pb.gz", "callflow.folded"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("no %s when the JVM ended: %v\n%s", f, err, stderr.String())
		}
	}
	threads, text := readLogRT(t, dir)
	calls := map[string]int64{}
	for _, rows := range threads {
		for _, r := range rows {
			calls[r.name] += r.calls
		}
	}
	if calls["JProfDemo.fib"] != 465 || calls["JProfDemo.empty"] != 1000 || calls["JProfDemo.work"] != 5 {
		t.Errorf("log-rt written at the end: fib %d, empty %d, work %d calls; want 465, 1000, 5\n%.3000s",
			calls["JProfDemo.fib"], calls["JProfDemo.empty"], calls["JProfDemo.work"], text)
	}

	off := t.TempDir()
	c = java(root, off, "calltree,report=off,dir="+off, "JProfDemo")
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("JProfDemo, report=off: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(off, "log-rt")); err == nil {
		t.Error("report=off wrote log-rt")
	}
}

// logSection is one "Thread PID/TID" section of log-rt.
type logSection struct {
	tid  string
	rows []logRow
}

// logSections returns log-rt's thread sections in order (an OS thread
// whose Java thread ended and was attached again has a section per thread).
func logSections(text string) []logSection {
	var out []logSection
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "Thread ") {
			out = append(out, logSection{tid: strings.Fields(l)[1]})
			continue
		}
		m := logRE.FindStringSubmatch(l)
		if m == nil || len(out) == 0 || strings.HasPrefix(m[6], "(") {
			continue
		}
		r := logRow{name: strings.TrimSpace(m[6])}
		r.lv, _ = strconv.Atoi(m[1])
		r.calls, _ = strconv.ParseInt(m[2], 10, 64)
		s := &out[len(out)-1]
		s.rows = append(s.rows, r)
	}
	return out
}

func (s logSection) calls(name string) (n int64) {
	for _, r := range s.rows {
		if r.name == name {
			n += r.calls
		}
	}
	return n
}

// Threads attached to an OS thread whose Java thread ended are recorded:
// the JVM's DestroyJavaVM thread (main's OS thread once main returned)
// runs the shutdown sequence and starts and joins the shutdown hook; a
// native thread attached, detached and attached again calls a method in
// each attach (ShutdownDemo).
func TestCalltreeThreadAttachedAgain(t *testing.T) {
	root := agentOnly(t)
	dir := t.TempDir()
	c := java(root, dir, "calltree,dir="+dir, "ShutdownDemo")
	out, err := c.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ShutdownDemo done 3") || !strings.Contains(string(out), "ShutdownDemo hook") {
		t.Fatalf("java: %v\n%s", err, out)
	}
	_, text := readLogRT(t, dir) // written when the JVM ended
	secs := logSections(text)
	var mainTID string
	for _, s := range secs {
		if s.calls("ShutdownDemo.main") == 1 {
			mainTID = s.tid
		}
	}
	if mainTID == "" {
		t.Fatalf("no thread with ShutdownDemo.main in log-rt:\n%s", text)
	}
	// The shutdown: on main's OS thread, in a section after main's.
	var shut *logSection
	for i, s := range secs {
		if s.tid == mainTID && s.calls("java.lang.Shutdown.shutdown") == 1 {
			shut = &secs[i]
		}
	}
	switch {
	case shut == nil:
		t.Errorf("java.lang.Shutdown.shutdown not on main's OS thread %s (the DestroyJavaVM thread lost)", mainTID)
	case shut.rows[0].name != "java.lang.Shutdown.shutdown" || shut.calls("java.lang.ApplicationShutdownHooks.runHooks") != 1 ||
		shut.calls("java.lang.Thread.start") != 1 || shut.calls("java.lang.Thread.join") == 0:
		t.Errorf("DestroyJavaVM's tree: want Shutdown.shutdown at its root, running the hooks (runHooks, the hook's start and join), got %+v", shut.rows)
	}
	var hook int64
	for _, s := range secs {
		hook += s.calls("ShutdownDemo.inHook")
	}
	if hook != 1 {
		t.Errorf("ShutdownDemo.inHook: %d calls, want 1 (the hook thread)", hook)
	}
	// The native thread: two sections of one OS thread, fromNative once each.
	byTID := map[string][]int64{}
	for _, s := range secs {
		if n := s.calls("ShutdownDemo.fromNative"); n > 0 {
			byTID[s.tid] = append(byTID[s.tid], n)
		}
	}
	if len(byTID) != 1 {
		t.Errorf("fromNative on %d OS threads %v, want 1 (attached twice)", len(byTID), byTID)
	}
	for tid, n := range byTID {
		if len(n) != 2 || n[0] != 1 || n[1] != 1 {
			t.Errorf("fromNative on OS thread %s: calls per attach %v, want [1 1]", tid, n)
		}
	}
	if t.Failed() {
		t.Logf("log-rt:\n%s", text)
	}
}
