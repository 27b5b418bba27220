package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"perfinsp/internal/testenv"
	"perfinsp/libperfutil/events"
)

// tools holds the hotspot binary and the bundled example program (plain
// and stripped), built once for every test.
var tools struct {
	once     sync.Once
	err      error
	dir      string
	hotspot  string
	example  string
	stripped string
}

func need(t *testing.T, prog string) {
	t.Helper()
	if _, err := exec.LookPath(prog); err != nil {
		testenv.Missing(t, "%s not installed (scripts/deps/hotspot.txt)", prog)
	}
}

func build(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("uprobe perf events need root or CAP_PERFMON; run the test as root")
	}
	need(t, "gcc")
	need(t, "strip")
	tools.once.Do(func() {
		dir, err := os.MkdirTemp("", "hotspot-test-")
		if err != nil {
			tools.err = err
			return
		}
		// 0755: the non-root test runs these binaries as nobody.
		if err := os.Chmod(dir, 0o755); err != nil {
			tools.err = err
			return
		}
		tools.dir = dir
		tools.hotspot = filepath.Join(dir, "hotspot")
		tools.example = filepath.Join(dir, "hotspot-example")
		tools.stripped = filepath.Join(dir, "hotspot-example-stripped")
		steps := [][]string{
			{"go", "build", "-o", tools.hotspot, "."},
			{"gcc", "-O2", "-g", "-fno-omit-frame-pointer", "-fno-optimize-sibling-calls", "-Wall", "-Werror", "-o", tools.example, "../../examples/hotspot.c"},
			{"cp", tools.example, tools.stripped},
			{"strip", "--strip-all", tools.stripped},
		}
		for _, s := range steps {
			if out, err := exec.Command(s[0], s[1:]...).CombinedOutput(); err != nil {
				tools.err = &exec.Error{Name: strings.Join(s, " ") + ": " + string(out), Err: err}
				return
			}
		}
	})
	if tools.err != nil {
		t.Fatal(tools.err)
	}
}

func readReport(t *testing.T, path string) Report {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return r
}

func funcByLevel(r Report, level int) map[string]*FuncStat {
	out := map[string]*FuncStat{}
	for _, f := range r.Funcs {
		if f.Level == level {
			out[f.Name] = f
		}
	}
	return out
}

func callerShares(f *FuncStat) map[string]float64 {
	out := map[string]float64{}
	for _, c := range f.Callers {
		out[c.Name] = c.Share
	}
	return out
}

func near(got, want, tol float64) bool { return got >= want-tol && got <= want+tol }

// countPerfFDs counts the perf event fds of process pid.
func countPerfFDs(pid int) int {
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	ents, err := os.ReadDir(dir)
	if err != nil {
		return -1
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink(dir + "/" + e.Name()); err == nil && l == "anon_inode:[perf_event]" {
			n++
		}
	}
	return n
}

// countProbeFDs counts the perf event fds of process pid but the anchors
// of its dynamic events (uprobe.Dynamic: one per event of its tracefs
// group, read before and after the fds: an anchor is opened after its
// event is added and closed before it is removed).
func countProbeFDs(pid int) int {
	before := dynamicEvents(pid)
	n := countPerfFDs(pid)
	for e := range dynamicEvents(pid) {
		before[e] = true
	}
	return n - len(before)
}

// dynamicEvents are the tracefs dynamic events of process pid's group.
func dynamicEvents(pid int) map[string]bool {
	out := map[string]bool{}
	for _, dir := range events.System.Tracefs {
		b, err := os.ReadFile(filepath.Join(dir, "uprobe_events"))
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) > 0 && strings.HasPrefix(f[0], "p:perfinsp_"+strconv.Itoa(pid)+"/") {
				out[f[0]] = true
			}
		}
		break
	}
	return out
}

var allRE = regexp.MustCompile(`^hotspot-example: iterations=\d+ calls hot=(\d+) a=\d+ b=\d+ c=\d+ x=\d+ all=(\d+) cpu_us=\d+\n$`)

// TestWalkFindsCallersLevelByLevel runs the bundled program under hotspot:
// hot's callers are c (2/3 of the calls, the program's exact split) and x
// (1/3), then b, a, main; each level holds only its own probes (the tool's
// JSON and its fds seen from outside); the target's output and exit code
// are unchanged; the hooks run far fewer times than full instrumentation.
func TestWalkFindsCallersLevelByLevel(t *testing.T) {
	build(t)
	dir := t.TempDir()
	js := filepath.Join(dir, "r.json")
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(tools.hotspot, "-s", "1", "--period", "300", "--max-overhead", "0", "--json", js, "--folded", filepath.Join(dir, "f.txt"),
		"-o", filepath.Join(dir, "r.txt"), "--", tools.example, longRun)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// Watch the tool's perf fds from outside while it runs.
	maxFDs := 0
	werr := runWalk(t, cmd, js, nil, func() {
		if n := countProbeFDs(cmd.Process.Pid); n > maxFDs {
			maxFDs = n
		}
	})
	ee, _ := werr.(*exec.ExitError)
	if ee == nil || ee.ExitCode() != 3 {
		t.Fatalf("hotspot exit = %v, want the example's exit code 3; stderr:\n%s", werr, stderr.String())
	}
	m := allRE.FindStringSubmatch(stdout.String())
	if m == nil {
		t.Fatalf("stdout is not exactly the example's output line:\n%q", stdout.String())
	}
	all, _ := strconv.ParseUint(m[2], 10, 64)
	r := readReport(t, js)
	txt, _ := os.ReadFile(filepath.Join(dir, "r.txt"))
	t.Logf("report:\n%s\nprogress:\n%s", txt, stderr.String())

	if len(r.Hot) == 0 || r.Hot[0].Name != "hot" || r.Hot[0].Pct < 50 {
		t.Fatalf("hot functions %+v: want hot first with most samples", r.Hot)
	}
	wantLevels := [][]string{{"hot"}, {"c", "x"}, {"b"}, {"a"}}
	if len(r.Levels) != len(wantLevels) {
		t.Fatalf("%d levels %+v, want %d", len(r.Levels), r.Levels, len(wantLevels))
	}
	for i, want := range wantLevels {
		lv := r.Levels[i]
		got := append([]string(nil), lv.Frontier...)
		if strings.Join(sortStrings(got), " ") != strings.Join(want, " ") {
			t.Errorf("level %d frontier %v, want %v", i, lv.Frontier, want)
		}
		if lv.Probes != 2*len(want) || lv.PerfFDs != lv.Probes || lv.PerfFDsEnd != 0 {
			t.Errorf("level %d: %d probes, %d perf fds open during, %d after; want %d, %d, 0", i, lv.Probes, lv.PerfFDs, lv.PerfFDsEnd, 2*len(want), 2*len(want))
		}
		if lv.EndedBy != "period" || lv.Calls < 300 {
			t.Errorf("level %d ended by %q after %d calls, want the period of 300 calls", i, lv.EndedBy, lv.Calls)
		}
	}
	if maxFDs == 0 || maxFDs > 5 {
		t.Errorf("at most %d perf fds seen open in the tool from outside, want 1..5 (the largest frontier, c and x, has 4 probes, and their ring's holder)", maxFDs)
	}
	hot := funcByLevel(r, 0)["hot"]
	sh := callerShares(hot)
	if !near(sh["c"], 2.0/3, 0.03) || !near(sh["x"], 1.0/3, 0.03) || len(sh) != 2 {
		t.Errorf("hot's callers %v, want c 2/3 and x 1/3", sh)
	}
	if hot.Returns == 0 || hot.MinNs == 0 || hot.MinNs > uint64(hot.MeanNs) || uint64(hot.MeanNs) > hot.MaxNs {
		t.Errorf("hot's time per call min %d mean %.0f max %d returns %d: want min <= mean <= max from matched returns", hot.MinNs, hot.MeanNs, hot.MaxNs, hot.Returns)
	}
	l1 := funcByLevel(r, 1)
	if s := callerShares(l1["c"]); s["b"] != 1 {
		t.Errorf("c's callers %v, want b only", s)
	}
	if s := callerShares(l1["x"]); s["main"] != 1 {
		t.Errorf("x's callers %v, want main only", s)
	}
	if s := callerShares(funcByLevel(r, 2)["b"]); s["a"] != 1 {
		t.Errorf("b's callers %v, want a only", s)
	}
	if s := callerShares(funcByLevel(r, 3)["a"]); s["main"] != 1 {
		t.Errorf("a's callers %v, want main only", s)
	}
	fold, _ := os.ReadFile(filepath.Join(dir, "f.txt"))
	if !regexp.MustCompile(`(?m)^main;a;b;c;hot \d+$`).Match(fold) || !regexp.MustCompile(`(?m)^main;x;hot \d+$`).Match(fold) {
		t.Errorf("folded stacks:\n%s\nwant main;a;b;c;hot and main;x;hot", fold)
	}
	t.Logf("hook executions during the walk: %d; calls a full entry/exit instrumentation would hook: %d entries + %d returns = %d",
		r.HookHits, all, all, 2*all)
	// The run ends with the walk: full instrumentation's count is of the
	// same run, over the walk. A loaded machine gives the target less CPU
	// during the walk while each level still hooks its 300 calls (and the
	// hits while its probes close): about a tenth seen at load 18.
	if r.HookHits == 0 || r.HookHits*5 > 2*all {
		t.Errorf("hook executions %d, want well under a fifth of full instrumentation's %d", r.HookHits, 2*all)
	}
}

func sortStrings(s []string) []string {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	return s
}

// startExample starts the example for secs seconds with its output kept.
func startExample(t *testing.T, prog string, secs string, cred *syscall.Credential) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	var out bytes.Buffer
	c := exec.Command(prog, secs)
	c.Stdout = &out
	if cred != nil {
		c.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Process.Kill(); _, _ = c.Process.Wait() })
	return c, &out
}

// startTool starts hotspot and returns a channel of its progress lines.
func startTool(t *testing.T, args ...string) (*exec.Cmd, <-chan string, *bytes.Buffer) {
	t.Helper()
	var stdout bytes.Buffer
	c := exec.Command(tools.hotspot, args...)
	c.Stdout = &stdout
	pr, err := c.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	return c, lines, &stdout
}

// waitLine waits for a progress line containing s.
func waitLine(t *testing.T, lines <-chan string, s string) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("hotspot ended before printing %q", s)
			}
			t.Log(l)
			if strings.Contains(l, s) {
				return
			}
		case <-timeout:
			t.Fatalf("no progress line with %q in 30s", s)
		}
	}
}

func exitOf(t *testing.T, c *exec.Cmd) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	select {
	case err := <-done:
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(30 * time.Second):
		_ = c.Process.Kill()
		t.Fatal("hotspot did not end within 30s")
	}
	return -1
}

// TestTargetKilledMidWalk: the target dies while a level is instrumented;
// the tool ends that level, reports what it saw and how the target died
// (its signal, while hot was probed), and exits non-zero: with -p the
// signal comes from the signal_deliver tracepoint, with -- from the exit
// status (the command's code, 128+signal).
func TestTargetKilledMidWalk(t *testing.T) {
	build(t)
	check := func(js string, sig int) {
		t.Helper()
		r := readReport(t, js)
		if r.Stopped != "target died" || len(r.Levels) != 1 || r.Levels[0].EndedBy != "target exited" || r.Levels[0].PerfFDsEnd != 0 {
			t.Fatalf("report stopped=%q levels=%+v: want one level ended by the target's death, no fd left", r.Stopped, r.Levels)
		}
		if d := r.Death; d == nil || d.Signal != sig || !strings.Contains(d.During, "level 0, probes in place on hot (entry and 1 exit)") || d.Core == "" {
			t.Fatalf("death %+v: want signal %d during level 0 with hot's probes in place", r.Death, sig)
		}
		if f := funcByLevel(r, 0)["hot"]; f == nil || f.Calls == 0 {
			t.Fatalf("no calls of hot seen before the kill: %+v", r.Funcs)
		}
	}
	target, _ := startExample(t, tools.example, "60", nil)
	js := filepath.Join(t.TempDir(), "r.json")
	tool, lines, _ := startTool(t, "-p", strconv.Itoa(target.Process.Pid), "-s", "0.5", "--period", "30s", "--max-overhead", "0", "--json", js)
	// The per-second progress line: level 0 has been counting calls.
	waitLine(t, lines, "level 0 frontier [hot] active probes 2 calls")
	if err := target.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_, _ = target.Process.Wait()
	waitLine(t, lines, "the target died of SIGKILL (signal 9")
	if code := exitOf(t, tool); code != 1 {
		t.Fatalf("hotspot -p exit %d after the target was killed, want 1", code)
	}
	check(js, 9)

	js = filepath.Join(t.TempDir(), "r.json")
	tool, lines, _ = startTool(t, "--period", "30s", "-s", "0.5", "--max-overhead", "0", "--json", js, "-o", os.DevNull, "--", tools.example, "60")
	waitLine(t, lines, "level 0 frontier [hot] active probes 2 calls")
	var pid int
	for _, p := range descendants(tool.Process.Pid) {
		if b, _ := os.ReadFile("/proc/" + strconv.Itoa(p) + "/comm"); strings.HasPrefix(string(b), "hotspot-example") {
			pid = p
		}
	}
	if pid == 0 || syscall.Kill(pid, syscall.SIGSEGV) != nil {
		t.Fatalf("the example (pid %d) not found or not killed", pid)
	}
	waitLine(t, lines, "the target died of SIGSEGV (signal 11, core")
	if code := exitOf(t, tool); code != 128+11 {
		t.Fatalf("hotspot -- exit %d after the target died of SIGSEGV, want 139", code)
	}
	check(js, 11)
}

// TestSIGINTRemovesEveryProbe: Ctrl-C mid-level closes every probe (the
// tool's perf fds drop to none), writes the report, exits 130; the target
// goes on undisturbed to its normal end.
func TestSIGINTRemovesEveryProbe(t *testing.T) {
	build(t)
	target, out := startExample(t, tools.example, longRun, nil)
	js := filepath.Join(t.TempDir(), "r.json")
	tool, lines, _ := startTool(t, "-p", strconv.Itoa(target.Process.Pid), "-s", "0.5", "--period", "30s", "--max-overhead", "0", "--json", js)
	waitLine(t, lines, "level 0 frontier [hot]")
	if n := countProbeFDs(tool.Process.Pid); n != 4 {
		t.Fatalf("%d perf fds open in the tool during level 0, want 4 (entry and exit probe of hot, their ring's holder, the death watch on the target's thread; the dynamic events' anchors not counted)", n)
	}
	if err := tool.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if code := exitOf(t, tool); code != 130 {
		t.Fatalf("hotspot exit %d after SIGINT, want 130", code)
	}
	r := readReport(t, js)
	if r.Stopped != "signal" || len(r.Levels) == 0 || r.Levels[len(r.Levels)-1].PerfFDsEnd != 0 {
		t.Fatalf("report stopped=%q levels=%+v: want stopped by the signal with no perf fd left", r.Stopped, r.Levels)
	}
	if ev := dynamicEvents(tool.Process.Pid); len(ev) > 0 {
		t.Fatalf("tracefs dynamic events of the tool left after SIGINT: %v", ev)
	}
	if err := target.Process.Signal(syscall.SIGUSR1); err != nil { // the end of its run
		t.Fatal(err)
	}
	err := target.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 || allRE.FindString(out.String()) == "" {
		t.Fatalf("target after the walk: %v, output %q; want exit 3 and its normal line", err, out.String())
	}
}

// TestStrippedTarget: without symbols the functions are the .eh_frame
// ranges; the walk still finds hot's two callers with the 2/3, 1/3 split.
func TestStrippedTarget(t *testing.T) {
	build(t)
	js := filepath.Join(t.TempDir(), "r.json")
	c := exec.Command(tools.hotspot, "-q", "-s", "1", "--period", "300", "--max-overhead", "0", "--depth", "3", "--json", js, "-o", os.DevNull, "--", tools.stripped, longRun)
	var out bytes.Buffer
	c.Stdout = &out
	if err := runWalk(t, c, js, nil, nil); !isExit(err, 3) {
		t.Fatalf("exit %v, want 3: %s", err, out.String())
	}
	r := readReport(t, js)
	if len(r.Hot) == 0 || !strings.Contains(r.Hot[0].Name, "(function at 0x") {
		t.Fatalf("hot functions %+v: want an .eh_frame range of the stripped file first", r.Hot)
	}
	var hot *FuncStat
	for _, f := range funcByLevel(r, 0) {
		hot = f
	}
	if hot == nil || len(hot.Callers) != 2 {
		t.Fatalf("level 0 %+v: want the hot range with two callers", hot)
	}
	if !near(hot.Callers[0].Share, 2.0/3, 0.03) || !near(hot.Callers[1].Share, 1.0/3, 0.03) {
		t.Fatalf("caller shares %.3f %.3f, want 2/3 and 1/3", hot.Callers[0].Share, hot.Callers[1].Share)
	}
	if len(r.Levels) < 3 || len(r.Levels[1].Frontier) != 2 {
		t.Fatalf("levels %+v: want 3, the second with both callers", r.Levels)
	}
}

// TestNonRootUser: as nobody, hotspot samples nobody's own process (user
// mode, perf_event_paranoid <= 2) and names its hot function, then says
// that uprobes need CAP_PERFMON; another user's process is refused.
func TestNonRootUser(t *testing.T) {
	build(t)
	need(t, "setpriv")
	nobody := &syscall.Credential{Uid: 65534, Gid: 65534}
	own, _ := startExample(t, tools.example, longRun, nobody)
	run := func(pid int) (string, string, int) {
		var o, e bytes.Buffer
		c := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", tools.hotspot, "-q", "-s", "0.5", "--period", "100", "-p", strconv.Itoa(pid))
		c.Stdout, c.Stderr = &o, &e
		err := c.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return o.String(), e.String(), code
	}
	o, e, code := run(own.Process.Pid)
	t.Logf("own process: exit %d\n%s%s", code, o, e)
	if !regexp.MustCompile(`(?m)^\s+\d+\.\d%\s+hot\s`).MatchString(o) {
		t.Errorf("nobody's own process: the sampled hot function is not reported:\n%s", o)
	}
	if code == 0 {
		// A kernel letting unprivileged users place uprobes: the walk ran.
		if !strings.Contains(o, "from c") {
			t.Errorf("walk ran as nobody but found no caller c:\n%s", o)
		}
	} else if !strings.Contains(e, "CAP_PERFMON") {
		t.Errorf("exit %d without saying that uprobes need CAP_PERFMON:\n%s", code, e)
	}
	root, _ := startExample(t, tools.example, longRun, nil)
	_, e, code = run(root.Process.Pid)
	if code == 0 || !strings.Contains(e, "root") {
		t.Errorf("nobody on root's process: exit %d, stderr %q; want a refusal saying what to do", code, e)
	}
	t.Logf("root's process: exit %d: %s", code, strings.TrimSpace(e))
}

// TestDutyCycle: with --duty 20 a level's probes are in place a fifth of
// the time, in several windows, so they see well under half the calls the
// target made during the level — counted from the same run: the target's
// CPU time in the level times its calls of hot per CPU second (its own
// count at its end); the callers' split is still found.
func TestDutyCycle(t *testing.T) {
	build(t)
	dir := t.TempDir()
	js := filepath.Join(dir, "r.json")
	// The level lasts 1000 calls seen, however long that takes: a
	// window's 100 ms see at most about 400 (a 1.5 s level ended after
	// one window where a busy machine made its closing phase last 1.5 s).
	c := exec.Command(tools.hotspot, "-q", "-s", "0.3", "--period", "1000", "--level-max", "0", "--depth", "1", "--duty", "20", "--json", js, "-o", os.DevNull, "--", tools.example, longRun)
	var out bytes.Buffer
	c.Stdout = &out
	err := runWalk(t, c, js, nil, nil)
	m := allRE.FindStringSubmatch(out.String())
	if !isExit(err, 3) || m == nil {
		t.Fatalf("exit %v (want the example's 3), output %q", err, out.String())
	}
	hotCalls, _ := strconv.ParseFloat(m[1], 64)
	cpuUs, _ := strconv.ParseFloat(regexp.MustCompile(`cpu_us=(\d+)`).FindStringSubmatch(out.String())[1], 64)
	r := readReport(t, js)
	if len(r.Levels) != 1 || r.Levels[0].EndedBy != "period" {
		t.Fatalf("levels %+v, want one ended by its period", r.Levels)
	}
	lv := r.Levels[0]
	made := float64(lv.TargetCPUNs) / 1e3 * hotCalls / cpuUs
	t.Logf("duty 20%%: %d calls of hot seen in %.2fs (probes in %.2fs, %d windows) of about %.0f made in the level (%.2fs of the target's CPU)",
		lv.Calls, lv.Seconds, lv.OnSec, lv.Windows, made, float64(lv.TargetCPUNs)/1e9)
	if lv.Windows < 2 {
		t.Errorf("%d probe windows for 1000 calls, want several", lv.Windows)
	}
	if lv.Calls == 0 || float64(lv.Calls)*2 > made {
		t.Errorf("%d calls seen of about %.0f made in the level: want some, well under half", lv.Calls, made)
	}
	hot := funcByLevel(r, 0)["hot"]
	if sh := callerShares(hot); !near(sh["c"], 2.0/3, 0.05) || !near(sh["x"], 1.0/3, 0.05) {
		t.Errorf("hot's callers %v, want c 2/3, x 1/3", sh)
	}
}

// isExit says whether err is an exit with code.
func isExit(err error, code int) bool {
	ee, ok := err.(*exec.ExitError)
	return ok && ee.ExitCode() == code
}

// TestNeverReturningCaller: in the example's "noreturn" mode the loop runs
// in loop_forever(), entered once before the walk and never returning. The
// walk finds it as the caller of x and a, instruments it (no call: it is
// never entered again), says so, and reaches the root from the sampled
// stacks through it: main, and the folded stacks go from there to hot.
func TestNeverReturningCaller(t *testing.T) {
	build(t)
	dir := t.TempDir()
	js := filepath.Join(dir, "r.json")
	txt := filepath.Join(dir, "r.txt")
	c := exec.Command(tools.hotspot, "-q", "-s", "0.5", "--period", "300", "--level-max", "2s", "--max-overhead", "0", "--json", js, "-o", txt, "--", tools.example, longRun, "200000", "noreturn")
	var out bytes.Buffer
	c.Stdout = &out
	if err := runWalk(t, c, js, nil, nil); !isExit(err, 3) || allRE.FindString(out.String()) == "" {
		t.Fatalf("exit %v, output %q: want the example's line and exit 3", err, out.String())
	}
	r := readReport(t, js)
	var lf *FuncStat
	for _, f := range r.Funcs {
		if f.Name == "loop_forever" {
			lf = f
		}
	}
	if lf == nil || lf.Calls != 0 {
		t.Fatalf("loop_forever %+v: want it instrumented with no call seen", lf)
	}
	if len(r.Levels) != 4 {
		t.Fatalf("%d levels, want 4 (hot, c x, b loop_forever, a)", len(r.Levels))
	}
	for lvl, name := range map[int]string{1: "x", 3: "a"} {
		f := funcByLevel(r, lvl)[name]
		if f == nil {
			t.Fatalf("level %d has no %s", lvl, name)
		}
		if s := callerShares(f); s["loop_forever"] != 1 {
			t.Errorf("%s's callers %v, want loop_forever", name, s)
		}
	}
	b, _ := os.ReadFile(txt)
	if !strings.Contains(string(b), "loop_forever: 0 calls (not entered while instrumented") {
		t.Errorf("report does not say loop_forever was not entered:\n%s", b)
	}
	if len(lf.RootPaths) == 0 || len(lf.RootPaths[0].Path) == 0 || lf.RootPaths[0].Path[0] != "main" || lf.RootPaths[0].Samples*2 < lf.RootSamples {
		t.Errorf("loop_forever's paths to the root %+v (of %d stacks): want main above it in most sampled stacks", lf.RootPaths, lf.RootSamples)
	}
	if !regexp.MustCompile(`(?m)main;loop_forever;a;b;c;hot \d+$`).Match(b) || !strings.Contains(string(b), "up to the root:") {
		t.Errorf("report:\n%s\nwant the path from main through loop_forever down to hot", b)
	}
}

// TestJITCodeNotInstrumentable: a hot loop in anonymous executable memory
// (as JIT code) is sampled and reported, as one row for its mapping, as
// not instrumentable; no probe is attempted and the target is untouched.
func TestJITCodeNotInstrumentable(t *testing.T) {
	build(t)
	jit := filepath.Join(t.TempDir(), "jit")
	if out, err := exec.Command("gcc", "-O2", "-Wall", "-Werror", "-o", jit, "testdata/jit.c").CombinedOutput(); err != nil {
		t.Fatalf("build testdata/jit.c: %v\n%s", err, out)
	}
	js := filepath.Join(t.TempDir(), "r.json")
	out, err := exec.Command(tools.hotspot, "-q", "-s", "0.5", "--json", js, "-o", os.DevNull, "--", jit, "4").Output()
	if err != nil || !strings.HasPrefix(string(out), "jit: ") {
		t.Fatalf("exit %v, output %q: want the target's line and exit 0", err, out)
	}
	r := readReport(t, js)
	if len(r.Hot) != 1 || !strings.HasPrefix(r.Hot[0].Name, "[anon]@0x") || r.Hot[0].NoProbe == "" || r.Hot[0].Pct < 50 {
		t.Fatalf("hot %+v: want one row for the anonymous mapping, marked not instrumentable", r.Hot)
	}
	if len(r.Levels) != 0 || r.HookHits != 0 {
		t.Fatalf("levels %+v, %d hits: want no probe", r.Levels, r.HookHits)
	}
	found := false
	for _, n := range r.Notes {
		found = found || strings.Contains(n, "not instrumentable: anonymous")
	}
	if !found {
		t.Fatalf("notes %q: want the reason the hot code cannot be probed", r.Notes)
	}
}

func TestMain(m *testing.M) {
	code := testenv.Run(m)
	if tools.dir != "" {
		os.RemoveAll(tools.dir)
	}
	os.Exit(code)
}

// runHotspot runs hotspot (as nobody when cred is set) and returns its
// stdout, stderr and exit code.
func runHotspot(t *testing.T, cred *syscall.Credential, args ...string) (string, string, int) {
	t.Helper()
	var o, e bytes.Buffer
	c := exec.Command(tools.hotspot, args...)
	if cred != nil {
		c = exec.Command("setpriv", append([]string{"--reuid=65534", "--regid=65534", "--clear-groups", tools.hotspot}, args...)...)
	}
	c.Stdout, c.Stderr = &o, &e
	err := c.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return o.String(), e.String(), code
}

// TestCommandMode: beside a command the report goes to stderr (the
// command's stdout is its own), a command quicker than the sampling is
// said to be so (not taken for another user's process) with its exit code
// kept, and a run that cannot place probes (nobody) exits non-zero.
func TestCommandMode(t *testing.T) {
	build(t)
	need(t, "setpriv")
	// The example runs until the report is out, then its run is ended
	// (SIGUSR1: its line, exit 3).
	end := func(pid int) { _ = syscall.Kill(pid, syscall.SIGUSR1) }
	o, e, code := runUntilReported(t, exec.Command(tools.hotspot, "-q", "-s", "0.3", "--period", "100", "--", tools.example, longRun), end)
	if code != 3 || allRE.FindString(o) == "" {
		t.Errorf("hotspot -- example: exit %d (want the example's 3); stdout is not the example's own:\n%s\nstderr:\n%s", code, o, e)
	}
	if !regexp.MustCompile(`(?m)^\s+\d+\.\d%\s+hot\s`).MatchString(e) {
		t.Errorf("the report is not on stderr:\n%s", e)
	}
	_, e, code = runHotspot(t, nil, "-q", "--", "sh", "-c", "exit 3")
	if code != 3 || strings.Contains(e, "another user") || !strings.Contains(e, "ended before it could be sampled") {
		t.Errorf("hotspot -- sh -c 'exit 3': exit %d, want 3 and a word that it ended first:\n%s", code, e)
	}
	// A command that exits 0 (the example, forked, exits 3): a failed walk
	// is hotspot's exit code. The shell runs the example until its stdin
	// (hotspot's) ends: the test closes it once the report is out.
	c := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", tools.hotspot, "-q", "-s", "0.3", "--period", "100", "--",
		"sh", "-c", tools.example+" "+longRun+" & p=$!; cat >/dev/null; kill -USR1 $p; wait $p; exit 0")
	in, err := c.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	o, e, code = runUntilReported(t, c, func(int) { in.Close() })
	t.Logf("as nobody: exit %d\n%s%s", code, o, e)
	if code == 0 && !strings.Contains(e, "from c") {
		t.Errorf("as nobody, hotspot -- example exits 0 without the walk (uprobes refused?):\n%s", e)
	}
	if code != 0 && !strings.Contains(e, "CAP_PERFMON") {
		t.Errorf("as nobody: exit %d without saying that uprobes need CAP_PERFMON:\n%s", code, e)
	}
}

// A usage error is one line that points to --help, as every tool's is.
func TestUsageErrorsOneLine(t *testing.T) {
	// -s 0 sampled nothing and said the target used no CPU.
	for _, args := range [][]string{{"--duty", "0", "-p", "1"}, {"--bogus"}, {"--period", "x", "-p", "1"}, {"-s", "0", "-p", "1"}, {"-s", "-1", "-p", "1"}} {
		var stdout, stderr bytes.Buffer
		code := run(append([]string{"hotspot"}, args...), &stdout, &stderr)
		lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
		if code != 2 || len(lines) != 1 || !strings.Contains(lines[0], "(hotspot --help for more)") || stdout.Len() != 0 {
			t.Errorf("hotspot %v: exit %d, stderr %q, stdout %q: want exit 2 and one line pointing to --help", args, code, stderr.String(), stdout.String())
		}
	}
}

// -p of a pid no process has is said so in one line, not taken for a
// process that exited.
func TestNoSuchProcess(t *testing.T) {
	c := exec.Command("true")
	if err := c.Run(); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := run([]string{"hotspot", "-p", strconv.Itoa(c.Process.Pid)}, &stdout, &stderr)
	if want := fmt.Sprintf("hotspot: process %d does not exist\n", c.Process.Pid); code != 1 || stderr.String() != want || stdout.Len() != 0 {
		t.Errorf("hotspot -p (a reaped pid): exit %d, stderr %q, stdout %q; want 1 and %q", code, stderr.String(), stdout.String(), want)
	}
}

// An output file that cannot be written is said before anything starts
// (found out after the walk, its results were lost), in one line; the
// command is not run.
func TestOutputCheckedFirst(t *testing.T) {
	dir := t.TempDir()
	ran := filepath.Join(dir, "ran")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--json", filepath.Join(dir, "no", "r.json")}, "hotspot: --json " + filepath.Join(dir, "no", "r.json") + ": cannot create it in " + filepath.Join(dir, "no") + ": no such file or directory (nothing was started)\n"},
		{[]string{"-o", dir}, "hotspot: --output " + dir + ": is a directory: name a file (nothing was started)\n"},
		{[]string{"--folded", filepath.Join(dir, "no", "f")}, "hotspot: --folded " + filepath.Join(dir, "no", "f") + ": cannot create it in " + filepath.Join(dir, "no") + ": no such file or directory (nothing was started)\n"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(append(append([]string{"hotspot"}, c.args...), "--", "touch", ran), &stdout, &stderr)
		if code != 1 || stderr.String() != c.want || stdout.Len() != 0 {
			t.Errorf("hotspot %q: exit %d, stderr %q, stdout %q; want 1 and %q", c.args, code, stderr.String(), stdout.String(), c.want)
		}
		if _, err := os.Stat(ran); err == nil {
			t.Fatalf("hotspot %q ran the command", c.args)
		}
	}
}

// TestSIGINTWhileCalibrating: Ctrl-C at the terminal (SIGINT to hotspot's
// process group) while the probe cost is still being measured is
// hotspot's alone to handle: its calibration child is in no process group
// a terminal signals (killed, it made the walk fail with "calibrate the
// probe cost: ... is gone" and exit 1); the run ends with the report of
// what was sampled and exit 130; the target runs on.
func TestSIGINTWhileCalibrating(t *testing.T) {
	build(t)
	target, _ := startExample(t, tools.example, longRun, nil)
	js := filepath.Join(t.TempDir(), "r.json")
	var stderr bytes.Buffer
	c := exec.Command(tools.hotspot, "-p", strconv.Itoa(target.Process.Pid), "-s", "60", "--json", js, "-o", os.DevNull)
	c.Stderr = &stderr
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // a job of its own, as a shell starts it
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL) })
	var child int
	testenv.WaitFor(t, "hotspot's calibration child", func() bool {
		for _, p := range descendants(c.Process.Pid)[1:] {
			// its environment, once it runs its own program
			if b, _ := os.ReadFile("/proc/" + strconv.Itoa(p) + "/environ"); bytes.Contains(b, []byte(calibEnv+"=1")) {
				child = p
			}
		}
		return child != 0
	})
	pgid, err := syscall.Getpgid(child)
	if err != nil {
		t.Fatalf("the calibration child: %v", err)
	}
	if pgid == c.Process.Pid {
		t.Errorf("the calibration child %d is in hotspot's process group: Ctrl-C at the terminal kills it", child)
	}
	if err := syscall.Kill(-c.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := exitOf(t, c); code != 130 || strings.Contains(stderr.String(), "calibrate") {
		t.Fatalf("hotspot exit %d after Ctrl-C while calibrating, want 130 and no calibration error; stderr:\n%s", code, stderr.String())
	}
	if r := readReport(t, js); r.Stopped != "signal" {
		t.Fatalf("report stopped=%q, want signal", r.Stopped)
	}
	if err := syscall.Kill(target.Process.Pid, 0); err != nil {
		t.Fatalf("the target did not survive: %v", err)
	}
}
