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
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/google/pprof/profile"

	"perfinsp/analysis/callflow"
	"perfinsp/internal/testenv"
)

var (
	buildOnce sync.Once
	buildErr  error
	root      string
)

// setup builds bin/libhookit.so, bin/callflow, bin/hookit and bin/rtdriver
// (make hookit; go build). Without gcc or make the test skips, except
// under CI=true where that is a failure.
func setup(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		wd, _ := os.Getwd()
		for d := wd; d != "/"; d = filepath.Dir(d) {
			if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
				root = d
				break
			}
		}
		if root == "" {
			buildErr = fmt.Errorf("no go.mod above %s", wd)
			return
		}
		for _, tool := range []string{"make", "gcc", "g++"} {
			if _, err := exec.LookPath(tool); err != nil {
				buildErr = fmt.Errorf("%s is not installed (apt-get install build-essential g++): %w", tool, err)
				return
			}
		}
		out, err := exec.Command("make", "-C", root, "--no-print-directory", "hookit").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("make hookit: %v\n%s", err, out)
			return
		}
		cmd := exec.Command("go", "build", "-o", filepath.Join(root, "bin")+"/", "./tools/hookit", "./tools/rtdriver")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		testenv.Missing(t, "cannot build the hook library: %v", buildErr)
	}
	return root
}

func runHookit(t *testing.T, args ...string) string {
	t.Helper()
	r := setup(t)
	dir := t.TempDir()
	a := append([]string{"-o", dir}, args...)
	cmd := exec.Command(filepath.Join(r, "scripts/run.hookit"), a...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("run.hookit %v: %v\n%s", args, err, out)
	}
	return dir
}

func load(t *testing.T, dir string) *callflow.Process {
	t.Helper()
	procs, err := callflow.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(procs) != 1 {
		t.Fatalf("%d processes, want 1", len(procs))
	}
	// The events in memory, for the tests that look at them (the reports
	// stream them from the files).
	for i, th := range procs[0].Threads {
		full, err := callflow.ReadThread(th.Path)
		if err != nil {
			t.Fatal(err)
		}
		procs[0].Threads[i] = full
	}
	return procs[0]
}

// paths maps "f1;f2;...;fn" to the calls of that path in tree.
func paths(tr *callflow.Tree) map[string]uint64 {
	m := map[string]uint64{}
	tr.Root.Walk(func(n *callflow.Node) {
		if n.Parent == nil {
			return
		}
		var names []string
		for _, p := range n.Path() {
			names = append(names, p.Name)
		}
		m[strings.Join(names, ";")] += n.Calls
	})
	return m
}

func checkPaths(t *testing.T, what string, got, want map[string]uint64) {
	t.Helper()
	var keys []string
	for k := range got {
		keys = append(keys, k)
	}
	for k := range want {
		if _, ok := got[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		if got[k] != want[k] {
			t.Errorf("%s: path %s: %d calls, want %d", what, k, got[k], want[k])
		}
	}
}

func treeOf(t *testing.T, a *callflow.Analysis, main bool) *callflow.Tree {
	t.Helper()
	for _, tr := range a.Trees {
		if (tr.TID == tr.PID) == main {
			return tr
		}
	}
	t.Fatalf("no %s thread among %d", map[bool]string{true: "main", false: "second"}[main], len(a.Trees))
	return nil
}

// The example's call counts and tree shape, exactly, in both threads (the
// second is created in the middle of work).
func TestExampleCallTreeExact(t *testing.T) {
	const n = 20000
	dir := runHookit(t, "-t", "--", filepath.Join(setup(t), "bin/callflow"), strconv.Itoa(n))
	p := load(t, dir)
	if len(p.Threads) != 2 {
		t.Fatalf("%d thread files, want 2 (main and the thread created mid-run)", len(p.Threads))
	}
	a := callflow.Analyze(p)
	want := map[string]uint64{
		"main": 1, "main;work": 1, "main;work;leaf": n, "main;work;empty": n,
		"main;work;chain1": 1, "main;work;chain1;chain2": 1, "main;work;chain1;chain2;chain3": 1,
		"main;work;chain1;chain2;chain3;leaf": 1,
		"main;work;caller_a":                  1, "main;work;caller_a;shared": 1, "main;work;caller_a;shared;leaf": 1,
		"main;work;caller_b": 1, "main;work;caller_b;shared": 2, "main;work;caller_b;shared;leaf": 2,
	}
	// fib(10): the calls per recursion depth.
	fib := "main;work"
	for _, c := range []uint64{1, 2, 4, 8, 16, 32, 52, 44, 16, 2} {
		fib += ";fib"
		want[fib] = c
	}
	mt := treeOf(t, a, true)
	checkPaths(t, "main thread", paths(mt), want)
	checkPaths(t, "second thread", paths(treeOf(t, a, false)), map[string]uint64{"worker": 1, "worker;leaf": n / 10})
	if mt.Repaired != 0 || mt.Unmatched != 0 || mt.OpenAtEnd != 0 {
		t.Errorf("stack repair where none is needed: %d repaired, %d unmatched, %d open", mt.Repaired, mt.Unmatched, mt.OpenAtEnd)
	}
	checkReportsAgree(t, dir, a)
	checkPprofEntries(t, dir, filepath.Join(setup(t), "bin/callflow"))
}

// checkPprofEntries: in callflow.pb.gz the example's functions are at
// their first instruction as the ELF file gives it, in a mapping of the
// example with its build id and the range holding it, with the source
// line of that instruction, so that pprof -list shows leaf's source.
func checkPprofEntries(t *testing.T, dir, prog string) {
	t.Helper()
	_, syms := testenv.ELF(t, prog)
	entry := map[string]uint64{}
	for _, s := range syms {
		entry[s.Name] = s.Value
	}
	buildID := testenv.BuildID(t, prog)
	pb := filepath.Join(dir, "callflow.pb.gz")
	fh, err := os.Open(pb)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	p, err := profile.Parse(fh)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	leafLine := int64(0)
	for _, l := range p.Location {
		name := l.Line[0].Function.Name
		want, ok := entry[name]
		if !ok || l.Mapping == nil || l.Mapping.File != prog {
			continue
		}
		seen[name] = true
		if name == "leaf" {
			leafLine = l.Line[0].Line
		}
		m := l.Mapping
		if l.Address != want || m.BuildID != buildID || l.Address < m.Start || l.Address >= m.Limit || l.Line[0].Line == 0 ||
			!strings.HasSuffix(l.Line[0].Function.Filename, "callflow.c") {
			t.Errorf("%s at %#x (its symbol at %#x), mapping %#x-%#x build id %q (want %q), %s:%d", name, l.Address, want, m.Start, m.Limit,
				m.BuildID, buildID, l.Line[0].Function.Filename, l.Line[0].Line)
		}
	}
	for _, name := range []string{"main", "work", "leaf", "fib", "shared", "worker"} {
		if !seen[name] {
			t.Errorf("callflow.pb.gz: no location of %s in %s", name, prog)
		}
	}
	// leaf's own metric on the line of its first instruction
	out, err := exec.Command("go", "tool", "pprof", "-list", "^leaf$", pb).CombinedOutput()
	m := regexp.MustCompile(`(?m)^\s+[0-9.]+\S*\s+[0-9.]+\S*\s+(\d+):`).FindSubmatch(out)
	if err != nil || m == nil || string(m[1]) != strconv.FormatInt(leafLine, 10) || !strings.Contains(string(out), "examples/callflow.c") {
		t.Errorf("go tool pprof -list leaf: no metric on leaf's line %d of callflow.c: %v\n%s", leafLine, err, out)
	}
}

// The reports written by run.hookit agree: CUM = BASE + children in the
// tree; the log-rt thread totals, the log-gen total, the folded stacks and
// the pprof profile all sum to the same calibrated metric.
func checkReportsAgree(t *testing.T, dir string, a *callflow.Analysis) {
	t.Helper()
	for _, tr := range a.Trees {
		tr.Root.Walk(func(n *callflow.Node) {
			s := n.Base
			for _, c := range n.Children {
				s += c.Cum
			}
			if s != n.Cum {
				t.Errorf("%s: CUM %d != BASE %d + children = %d", n.Name, n.Cum, n.Base, s)
			}
		})
	}
	total := a.Total()
	if total == 0 {
		t.Fatal("total calibrated metric is 0")
	}
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	var rt uint64
	for _, l := range strings.Split(string(read("log-rt")), "\n") {
		if strings.HasPrefix(l, "Thread ") {
			i := strings.Index(l, "total BASE ")
			v, _ := strconv.ParseUint(strings.Fields(l[i+len("total BASE "):])[0], 10, 64)
			rt += v
		}
	}
	var gen uint64
	for _, l := range strings.Split(string(read("log-gen")), "\n") {
		if f := strings.Fields(l); len(f) >= 3 && f[0] == "total" && f[1] == "BASE" {
			gen, _ = strconv.ParseUint(f[2], 10, 64)
		}
	}
	var rows uint64
	for _, r := range a.Flat() {
		rows += r.Base
	}
	var folded uint64
	sc := bufio.NewScanner(bytes.NewReader(read("callflow.folded")))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		v, err := strconv.ParseUint(f[len(f)-1], 10, 64)
		if err != nil {
			t.Fatalf("folded line %q: %v", sc.Text(), err)
		}
		folded += v
	}
	prof, err := profile.Parse(bytes.NewReader(read("callflow.pb.gz")))
	if err != nil {
		t.Fatal(err)
	}
	var pp uint64
	for _, s := range prof.Sample {
		pp += uint64(s.Value[1])
	}
	t.Logf("totals: tree %d, log-rt %d, log-gen %d (rows %d), folded %d, pprof %d", total, rt, gen, rows, folded, pp)
	for name, v := range map[string]uint64{"log-rt": rt, "log-gen": gen, "log-gen rows": rows, "folded": folded, "pprof": pp} {
		if v != total {
			t.Errorf("%s total %d != tree total %d", name, v, total)
		}
	}
	// System-call figures come from the module only (metric tsc or tsc-user).
	if a.Info.Backend != "kmod" && (a.Info.Sys != "none" || bytes.Contains(read("log-gen"), []byte(" NSYS "))) {
		t.Errorf("backend %s, metric %s: info sys=%q, log-gen with a SYS column: system-call figures where none were measured",
			a.Info.Backend, a.Info.Metric, a.Info.Sys)
	}
	if a.Info.Backend != "kmod" && (a.Info.Faults != "none" || a.Info.FaultGlue != 0) {
		t.Errorf("backend %s, metric %s: info faults=%q fault_glue=%v: fault figures where none were measured",
			a.Info.Backend, a.Info.Metric, a.Info.Faults, a.Info.FaultGlue)
	}
	if a.Info.Backend != "kmod" && (a.Info.Resumes != "none" || a.Info.ResumeGlue != 0) {
		t.Errorf("backend %s, metric %s: info resumes=%q resume_glue=%v: resume figures where none were measured",
			a.Info.Backend, a.Info.Metric, a.Info.Resumes, a.Info.ResumeGlue)
	}
	if !bytes.Contains(read("callflow.trace.json"), []byte(`"ph":"B"`)) {
		t.Error("the Chrome trace has no begin events")
	}
}

// An empty function's calibrated time is about 0: the median of its
// measured intervals minus t_I lies within the spread of the start-up
// measurement, or a tenth of the raw interval (raw TSC: the finest
// resolution here).
func TestEmptyFunctionCalibratedNearZero(t *testing.T) {
	// The start-up calibration and the run are measured at different
	// moments: on a busy machine one of them can be disturbed alone.
	testenv.Retry(t, 3, "empty function calibrated near zero", func(a *testenv.Attempt) {
		emptyCalibratedOnce(t, a)
	})
}

func emptyCalibratedOnce(t *testing.T, a *testenv.Attempt) {
	dir := runHookit(t, "-m", "rdtsc", "--", filepath.Join(setup(t), "bin/callflow"), "200000")
	p := load(t, dir)
	an := callflow.Analyze(p)
	var fn uint64
	var node *callflow.Node
	treeOf(t, an, true).Root.Walk(func(n *callflow.Node) {
		if n.Name == "empty" {
			fn, node = n.Fn, n
		}
	})
	if node == nil {
		t.Fatal("no node for empty")
	}
	var d []uint64
	for _, th := range p.Threads {
		for i := 1; i < len(th.Events); i++ {
			e, x := th.Events[i-1], th.Events[i]
			if e.Kind == callflow.KindEnter && x.Kind == callflow.KindExit && e.Fn == fn && x.Fn == fn {
				d = append(d, x.Early-e.Late)
			}
		}
	}
	if len(d) != 200000 {
		t.Fatalf("%d enter/exit pairs of empty, want 200000", len(d))
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	med := float64(d[len(d)/2])
	in := p.Info
	// The start-up measurement's own spread, or a tenth of the raw
	// interval: calibration must take away at least nine tenths of what
	// the hooks add to an empty function (beside a busy job the start-up
	// and the run see different contention for the core).
	spread := max(in.TInnerMed-in.TInner, 2, med/10)
	cal := med - in.TInner
	t.Logf("empty: raw median %.0f cycles per call, t_I %.2f (median %.2f): calibrated median %.2f (spread %.2f); mean calibrated BASE %.2f per call (raw mean %.2f; the mean carries the outliers: preemption, interrupts, page faults)",
		med, in.TInner, in.TInnerMed, cal, spread, float64(node.Base)/float64(node.Calls), float64(node.Rough)/float64(node.Calls))
	if in.TInner <= 0 {
		t.Fatalf("t_I %.2f: the start-up calibration measured nothing", in.TInner)
	}
	if cal < -spread || cal > spread {
		a.Errorf("calibrated median of the empty function %.2f cycles, want 0 within ±%.2f", cal, spread)
	}
}

func TestLongjmpStackRepair(t *testing.T) {
	dir := runHookit(t, "--", filepath.Join(setup(t), "bin/callflow"), "longjmp")
	tr := treeOf(t, callflow.Analyze(load(t, dir)), true)
	checkPaths(t, "longjmp", paths(tr), map[string]uint64{
		"main": 1, "main;jumper": 1, "main;jumper;deep1": 1, "main;jumper;deep1;deep2": 1,
		"main;jumper;after_jump": 1, "main;jumper;after_jump;leaf": 1,
	})
	if tr.Repaired != 2 {
		t.Errorf("%d frames repaired, want 2 (deep1 and deep2 left by longjmp)", tr.Repaired)
	}
}

// Code built the way people build it: at -O2 gcc inlines small functions
// and calls an inlined function's hooks from its caller's frame (the same
// stack pointer) with its caller's call site. The inlined callee is
// nested in its caller, not taken for a sibling after a longjmp (which
// closed the caller: "leaf" beside "mid", N frames repaired and N exits
// unmatched), also where another call's hooks came between its caller's
// entry and its own (mixed: callee, then the inlined leaf); a function
// left by longjmp and called again from the same call site is still
// closed by the next call.
func TestInlinedCalleesAtO2(t *testing.T) {
	const n = 200
	setup(t)
	prog := filepath.Join(t.TempDir(), "inlined")
	if out, err := exec.Command("gcc", "-O2", "-finstrument-functions", "-o", prog, "testdata/inlined.c").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	dir := runHookit(t, "--", prog, strconv.Itoa(n))
	p := load(t, dir)
	a := callflow.Analyze(p)
	tr := treeOf(t, a, true)
	checkPaths(t, "inlined", paths(tr), map[string]uint64{
		"main": 1, "main;mid": n, "main;mid;leaf": 10 * n, "main;jumper": n, "main;after": 1,
		"main;mixed": n, "main;mixed;callee": n, "main;mixed;leaf": n,
	})
	if tr.Repaired != n || tr.Unmatched != 0 {
		t.Errorf("%d frames repaired, %d exits unmatched; want %d (each jumper left by longjmp) and 0", tr.Repaired, tr.Unmatched, n)
	}
	// The run is the case meant: leaf's entries come at mid's stack
	// pointer, marked inlined; jumper's are not marked.
	var leafInl, jumperInl int
	names := callflow.ProcessNamer(p)
	for _, e := range p.Threads[0].Events {
		if e.Kind != callflow.KindEnter || !e.Inlined {
			continue
		}
		switch names.Name(e.Fn) {
		case "leaf":
			leafInl++
		case "jumper":
			jumperInl++
		}
	}
	if leafInl != 11*n || jumperInl != 0 {
		t.Errorf("entries marked inlined: leaf %d (want %d: gcc inlined it into mid and mixed), jumper %d (want 0)", leafInl, 11*n, jumperInl)
	}
}

func TestExitFromDeepStack(t *testing.T) {
	dir := runHookit(t, "--", filepath.Join(setup(t), "bin/callflow"), "deepexit")
	tr := treeOf(t, callflow.Analyze(load(t, dir)), true)
	checkPaths(t, "deepexit", paths(tr), map[string]uint64{
		"main": 1, "main;exit2": 1, "main;exit2;exit1": 1, "main;exit2;exit1;deep_exit": 1,
		"main;exit2;exit1;deep_exit;leaf": 1,
	})
	if tr.OpenAtEnd != 4 {
		t.Errorf("%d frames open at the end, want 4 (main exit2 exit1 deep_exit)", tr.OpenAtEnd)
	}
}

// spin starts `callflow spin` under the hook library and waits for "ready".
func spin(t *testing.T, dir string, env ...string) *exec.Cmd {
	t.Helper()
	r := setup(t)
	cmd := exec.Command(filepath.Join(r, "bin/callflow"), "spin")
	cmd.Env = append(os.Environ(), append([]string{"HOOKIT_DIR=" + dir, "LD_PRELOAD=" + filepath.Join(r, "bin/libhookit.so")}, env...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("callflow spin said %q: %v", line, err)
	}
	go io.Copy(io.Discard, out)
	return cmd
}

// leafCalls is the number of leaf entries in pid's main thread file so far.
func leafCalls(t *testing.T, dir string, pid int) (calls uint64, th *callflow.Thread) {
	t.Helper()
	path := filepath.Join(dir, fmt.Sprintf("hookit-%d-%d.bin", pid, pid))
	if _, err := os.Stat(path); err != nil {
		return 0, nil
	}
	th, err := callflow.ReadThread(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range th.Events {
		if e.Kind == callflow.KindEnter {
			calls++
		}
	}
	return calls, th
}

// A program killed with SIGKILL leaves every event it recorded readable.
func TestSIGKILLLeavesPartialResult(t *testing.T) {
	dir := t.TempDir()
	cmd := spin(t, dir)
	pid := cmd.Process.Pid
	testenv.WaitFor(t, "20000 recorded calls", func() bool { n, _ := leafCalls(t, dir, pid); return n >= 20000 })
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	n, th := leafCalls(t, dir, pid)
	if !th.Partial {
		t.Error("the killed thread's file is not marked partial")
	}
	out, err := exec.Command(filepath.Join(root, "bin/hookit"), "report", "-i", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("hookit report: %v\n%s", err, out)
	}
	tr := treeOf(t, callflow.Analyze(load(t, dir)), true)
	got := paths(tr)
	if got["main;spin"] != 1 || got["main;spin;leaf"] < 20000 || got["main;spin;leaf"]+2 != n {
		t.Errorf("after SIGKILL: main;spin %d, main;spin;leaf %d of %d entries recorded", got["main;spin"], got["main;spin;leaf"], n)
	}
	rt, _ := os.ReadFile(filepath.Join(dir, "log-rt"))
	if !bytes.Contains(rt, []byte("cut short")) {
		t.Error("log-rt does not say the thread file was cut short")
	}
}

func rtdriver(t *testing.T, dir string, pid int, cmd string) (string, error) {
	out, err := exec.Command(filepath.Join(root, "bin/rtdriver"), "-d", dir, "-p", strconv.Itoa(pid), cmd).CombinedOutput()
	return string(out), err
}

// rtdriver against a running program that started with tracing off.
func TestRtdriverStartEndReset(t *testing.T) {
	dir := t.TempDir()
	cmd := spin(t, dir, "HOOKIT_START=off")
	pid := cmd.Process.Pid
	if n, _ := leafCalls(t, dir, pid); n != 0 {
		t.Fatalf("%d calls recorded with tracing off", n)
	}
	if out, err := rtdriver(t, dir, pid, "start"); err != nil || !strings.HasPrefix(out, "ok start") {
		t.Fatalf("rtdriver start: %q %v", out, err)
	}
	testenv.WaitFor(t, "calls after start", func() bool { n, _ := leafCalls(t, dir, pid); return n >= 5000 })
	if out, err := rtdriver(t, dir, pid, "end"); err != nil {
		t.Fatalf("rtdriver end: %q %v", out, err)
	}
	n1, _ := leafCalls(t, dir, pid)
	// Two more round trips to the runtime: the program keeps calling leaf
	// meanwhile, but nothing is recorded.
	for _, c := range []string{"flush", "flush"} {
		if out, err := rtdriver(t, dir, pid, c); err != nil {
			t.Fatalf("rtdriver %s: %q %v", c, out, err)
		}
	}
	n2, _ := leafCalls(t, dir, pid)
	if n2 > n1+1 {
		t.Errorf("recording went on after end: %d calls, then %d", n1, n2)
	}
	if out, err := rtdriver(t, dir, pid, "reset"); err != nil {
		t.Fatalf("rtdriver reset: %q %v", out, err)
	}
	if out, err := rtdriver(t, dir, pid, "start"); err != nil {
		t.Fatalf("rtdriver start: %q %v", out, err)
	}
	testenv.WaitFor(t, "calls after the second start", func() bool { n, _ := leafCalls(t, dir, pid); return n >= n2+1000 })
	if out, err := rtdriver(t, dir, pid, "shutdown"); err != nil {
		t.Fatalf("rtdriver shutdown: %q %v", out, err)
	}
	if out, err := rtdriver(t, dir, pid, "bogus"); err == nil || !strings.Contains(out, "unknown command") {
		t.Errorf("rtdriver bogus: %q %v, want an error naming the commands", out, err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	n3, th := leafCalls(t, dir, pid)
	tr := callflow.Build(th, callflow.Calibration{})
	if tr.Resets != 1 {
		t.Errorf("%d resets seen, want 1", tr.Resets)
	}
	// After the reset only the calls of the second start count.
	var calls uint64
	tr.Root.Walk(func(n *callflow.Node) { calls += n.Calls })
	if calls == 0 || calls > n3-n2 {
		t.Errorf("%d calls after the reset; %d were recorded after the first end", calls, n3-n2)
	}
}

// The in-process API (hookit_api.h) as an agent uses it: bin/callflow_api
// links libhookit (no preload, no HOOKIT_DIR), starts it with
// hookit_init, records ids that are not addresses with method types,
// names them, ends a thread's file and shuts down; events before the
// start, after the thread's end and after the shutdown are not recorded.
func TestInProcessAPI(t *testing.T) {
	r := setup(t)
	dir := t.TempDir()
	cmd := exec.Command(filepath.Join(r, "bin/callflow_api"), dir)
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "HOOKIT_") && !strings.HasPrefix(e, "LD_PRELOAD=") {
			cmd.Env = append(cmd.Env, e)
		}
	}
	out, err := cmd.CombinedOutput()
	if err != nil || string(out) != "dropped 0\n" {
		t.Fatalf("callflow_api: %v\n%s", err, out)
	}
	p := load(t, dir)
	// main, the second thread and the thread started again on its OS thread
	if len(p.Threads) != 3 || p.Info.TInnerAPI <= 0 || p.Info.TOuterAPI <= 0 {
		t.Fatalf("%d threads (want 3), API calibration t_I %.2f t_O %.2f", len(p.Threads), p.Info.TInnerAPI, p.Info.TOuterAPI)
	}
	if th := p.Threads; th[1].TID != th[2].TID || th[1].Life != 1 || th[2].Life != 2 || th[0].Life != 1 {
		t.Errorf("threads (TID, life): (%d %d) (%d %d) (%d %d), want the second thread's OS thread twice, lives 1 and 2",
			th[0].TID, th[0].Life, th[1].TID, th[1].Life, th[2].TID, th[2].Life)
	}
	var exc, native int
	for _, th := range p.Threads {
		if th.Partial {
			t.Errorf("thread %d: file not finished", th.TID)
		}
		for _, e := range th.Events {
			switch {
			case e.Fn == 0x4000:
				t.Errorf("thread %d: an event outside the recording was recorded: %+v", th.TID, e)
			case e.Kind == callflow.KindExcExit && e.Fn == 0x3000 && e.Type == 4 && e.API:
				exc++
			case e.Fn == 0x2000 && e.Type == 5 && e.API:
				native++
			}
		}
	}
	if exc != 1 || native != 2000 {
		t.Errorf("%d exception exits of Main.helper (want 1), %d native events (want 2000)", exc, native)
	}
	a := callflow.Analyze(p)
	main, second := treeOf(t, a, true), treeOf(t, a, false)
	checkPaths(t, "main thread", paths(main), map[string]uint64{
		"Main.run()V": 1, "Main.run()V;Native.call(I)I": 1000, "Main.run()V;Main.helper (J)V": 1,
	})
	checkPaths(t, "second thread", paths(second), map[string]uint64{"Main.run()V": 1, "Main.run()V;Main.helper (J)V": 10})
	again := a.Trees[len(a.Trees)-1]
	if again.Life != 2 {
		t.Fatalf("the last tree is life %d of thread %d, want the second thread's OS thread's second", again.Life, again.TID)
	}
	checkPaths(t, "thread started again", paths(again), map[string]uint64{"Main.helper (J)V": 1})
	for _, tr := range []*callflow.Tree{main, second, again} {
		if tr.OpenAtEnd != 0 || tr.Unmatched != 0 || tr.Repaired != 0 {
			t.Errorf("thread %d: open %d unmatched %d repaired %d", tr.TID, tr.OpenAtEnd, tr.Unmatched, tr.Repaired)
		}
	}
	// The sequence minima keyed by PI's 8 types x 3 transitions.
	if out, err := exec.Command(filepath.Join(r, "bin/hookit"), "report", "-i", dir, "--cal", "minima", "--seq-key", "8x3").CombinedOutput(); err != nil {
		t.Fatalf("hookit report: %v\n%s", err, out)
	}
	rt, _ := os.ReadFile(filepath.Join(dir, "log-rt"))
	for _, want := range []string{"jitted-En-native-Ex-jitted", "native-Ex-jitted-En-native", "jitted-En-interp-static-Xx-jitted"} {
		if !regexp.MustCompile(`(?m)^\s+` + want + `\s+min \d+ \(\d+ seen\)$`).Match(rt) {
			t.Errorf("log-rt has no minimum for %s:\n%s", want, rt)
		}
	}
}

// C++ exceptions thrown through instrumented frames (g++
// -finstrument-functions): g++ runs the exit hook of every frame the
// unwinder leaves, so catcher;middle;thrower closes exactly;
// the frames of c_through and c_layer (C, no -fexceptions) are left without
// their exits and the stack pointer of the catch block's next entry closes
// them. Call counts and tree exact.
func TestCxxExceptionStackRepair(t *testing.T) {
	dir := runHookit(t, "-m", "rdtsc", "--", filepath.Join(setup(t), "bin/callflow_exc"), "100")
	tr := treeOf(t, callflow.Analyze(load(t, dir)), true)
	checkPaths(t, "exceptions", paths(tr), map[string]uint64{
		"main": 1, "main;catcher": 100, "main;catcher;middle": 100, "main;catcher;middle;thrower": 100,
		"main;catcher;middle;thrower;leaf": 100, "main;after": 200, "main;after;leaf": 200,
		"main;catcher_c": 100, "main;catcher_c;c_through": 100, "main;catcher_c;c_through;c_layer": 100,
		"main;catcher_c;c_through;c_layer;thrower": 100, "main;catcher_c;c_through;c_layer;thrower;leaf": 100,
		"main;catcher_c;leaf": 100,
	})
	if tr.Repaired != 200 || tr.Unmatched != 0 || tr.OpenAtEnd != 0 {
		t.Errorf("repaired %d (want 200: the missed exits of c_through and c_layer), unmatched %d, open at the end %d", tr.Repaired, tr.Unmatched, tr.OpenAtEnd)
	}
}

// A trainer run writes its minima (run.hookit -o train=FILE); a later run
// loads them (-o minima=FILE) and log-rt says so; a run with another
// metric is refused.
func TestTrainingFile(t *testing.T) {
	r := setup(t)
	file := filepath.Join(t.TempDir(), "trained.minima")
	runHookit(t, "-m", "rdtsc", "-o", "train="+file, "--", filepath.Join(r, "bin/callflow"), "1000")
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	m, metric, err := callflow.ReadMinima(f)
	f.Close()
	if err != nil || metric != "rdtsc" || len(m.Min) < 4 {
		t.Fatalf("training file: %v, metric %q, %d keys", err, metric, len(m.Min))
	}
	dir := runHookit(t, "-m", "rdtsc", "-o", "minima="+file, "--", filepath.Join(r, "bin/callflow"), "10")
	rt, _ := os.ReadFile(filepath.Join(dir, "log-rt"))
	if !bytes.Contains(rt, []byte("merged with a training file")) {
		t.Errorf("log-rt does not say the trained minima were applied:\n%.600s", rt)
	}
	out, err := exec.Command(filepath.Join(r, "scripts/run.hookit"), "-m", "task-clock", "-o", t.TempDir(), "-o", "minima="+file, "--",
		filepath.Join(r, "bin/callflow"), "10").CombinedOutput()
	if err == nil || !bytes.Contains(out, []byte("trained with metric rdtsc")) {
		t.Errorf("minima of another metric: %v\n%s", err, out)
	}
}

// shutdownRace is a program whose threads record events without a pause
// while its main thread shuts the runtime down (hookit_shutdown), as an
// agent's VM death or rtdriver shutdown does.
const shutdownRace = `#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <time.h>
#include "hookit_api.h"

static volatile int stop;
static int started;

static void *spin(void *arg)
{
	unsigned long id = 0x1000 + (unsigned long)arg;

	hookit_enter(id, HOOKIT_TYPE_NATIVE);
	hookit_exit(id, HOOKIT_TYPE_NATIVE);
	__atomic_add_fetch(&started, 1, __ATOMIC_SEQ_CST);
	while (!stop) {
		hookit_enter(id, HOOKIT_TYPE_NATIVE);
		hookit_exit(id, HOOKIT_TYPE_NATIVE);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	char opts[4200];
	pthread_t th[4];
	struct timespec ms = {0, 20000000};

	snprintf(opts, sizeof(opts), "dir=%s", argv[1]);
	if (argc < 2 || hookit_init(opts) != 0) {
		fprintf(stderr, "hookit_init: %s\n", hookit_error());
		return 1;
	}
	for (long i = 0; i < 4; i++)
		pthread_create(&th[i], NULL, spin, (void *)i);
	while (__atomic_load_n(&started, __ATOMIC_SEQ_CST) < 4)
		sched_yield();
	nanosleep(&ms, NULL);
	hookit_shutdown();
	nanosleep(&ms, NULL);
	stop = 1;
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	return 0;
}
`

// TestShutdownWhileThreadsRecord: threads inside a hook when the runtime
// is shut down finish their event before their file gets its end mark.
// Before, the end could land under a thread's last event and the file
// did not load ("record N: a record after the end"; CI saw it once in
// TestCalltreeRtdriver). 20 runs, each file read back whole.
func TestShutdownWhileThreadsRecord(t *testing.T) {
	r := setup(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "race.c")
	prog := filepath.Join(dir, "race")
	if err := os.WriteFile(src, []byte(shutdownRace), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(r, "bin")
	if out, err := exec.Command("gcc", "-O1", "-pthread", "-I"+filepath.Join(r, "libperfutil/c/hookit"), "-o", prog, src, "-L"+bin, "-lhookit", "-Wl,-rpath,"+bin).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	for run := 0; run < 20; run++ {
		out := filepath.Join(dir, fmt.Sprint("run", run))
		cmd := exec.Command(prog, out)
		for _, e := range os.Environ() {
			if !strings.HasPrefix(e, "HOOKIT_") && !strings.HasPrefix(e, "LD_PRELOAD=") {
				cmd.Env = append(cmd.Env, e)
			}
		}
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("run %d: %v\n%s", run, err, b)
		}
		p := load(t, out)
		events := 0
		for _, th := range p.Threads {
			if th.Partial {
				t.Errorf("run %d: thread %d: file without its end mark", run, th.TID)
			}
			events += len(th.Events)
		}
		if len(p.Threads) < 4 || events == 0 {
			t.Fatalf("run %d: %d threads, %d events: want the 4 spinning threads' events (and the main thread's marks)", run, len(p.Threads), events)
		}
	}
}

// The blocks the runtime allocates ahead of a thread file's end (to
// spare the file system's page-by-page reservation inside each buffer's
// write) are given back when the file is finished: after the run, no
// file holds more blocks than its size needs.
func TestThreadFilesKeepNoBlocksPastTheirEnd(t *testing.T) {
	r := setup(t)
	dir := t.TempDir()
	cmd := exec.Command(filepath.Join(r, "bin/callflow"), "400000")
	cmd.Env = append(os.Environ(), "HOOKIT_DIR="+dir, "LD_PRELOAD="+filepath.Join(r, "bin/libhookit.so"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("callflow: %v\n%s", err, out)
	}
	bins, _ := filepath.Glob(filepath.Join(dir, "hookit-*.bin"))
	if len(bins) == 0 {
		t.Fatal("no thread file")
	}
	var biggest int64
	for _, b := range bins {
		var st syscall.Stat_t
		if err := syscall.Stat(b, &st); err != nil {
			t.Fatal(err)
		}
		biggest = max(biggest, st.Size)
		// a block's slack and the extent tree's own blocks: 64 KB
		if alloc := st.Blocks * 512; alloc > st.Size+64<<10 {
			t.Errorf("%s: %d bytes, %d allocated: the blocks past its end were not given back", filepath.Base(b), st.Size, alloc)
		}
	}
	if biggest < 8<<20 { // several allocations ahead (256 KB to 4 MB each) were made
		t.Fatalf("the biggest thread file holds %d bytes; the check wants several MB", biggest)
	}
}
