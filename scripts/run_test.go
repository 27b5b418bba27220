// Package scripts tests run.tprof and run.itrace as a user runs them: in a
// process group of their own, interrupted with real signals, their output
// compared byte for byte with the command's own.
package scripts

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"perfinsp/format/nrm2"
	"perfinsp/format/trace"
	"perfinsp/internal/testenv"
	"perfinsp/internal/tracetest"
)

// The tests keep HOME and the caches in a temporary directory of their own.
func TestMain(m *testing.M) { testenv.Main(m) }

// env is one test's facility with the scripts copied beside its bin/, so
// that they run the tools built for the test.
type env struct {
	*tracetest.Env
	scripts string
}

func setup(t *testing.T) *env {
	t.Helper()
	e := tracetest.Setup(t, "./tools/post")
	dir := filepath.Join(e.Dir, "scripts")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"run.tprof", "run.itrace", "runlib.sh"} {
		b, err := os.ReadFile(filepath.Join(tracetest.Root(), "scripts", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return &env{Env: e, scripts: dir}
}

// run is a script started in a process group of its own (as a shell
// starts a job), its output kept apart.
type run struct {
	cmd            *exec.Cmd
	stdout, stderr bytes.Buffer
	done           chan struct{}
	code           int
}

func (e *env) start(dir, script string, args ...string) *run {
	e.T.Helper()
	return e.startWith(nil, dir, script, args...)
}

// startWith starts the script through prefix (a command that execs its
// arguments, such as env), in a process group of its own.
func (e *env) startWith(prefix []string, dir, script string, args ...string) *run {
	e.T.Helper()
	argv := append(append(append([]string(nil), prefix...), filepath.Join(e.scripts, script)), args...)
	r := &run{cmd: exec.Command(argv[0], argv[1:]...), done: make(chan struct{})}
	r.cmd.Env, r.cmd.Dir = e.Environ, dir
	r.cmd.Stdout, r.cmd.Stderr = &r.stdout, &r.stderr
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := r.cmd.Start(); err != nil {
		e.T.Fatal(err)
	}
	go func() {
		err := r.cmd.Wait()
		r.code = 0
		if ee, ok := err.(*exec.ExitError); ok {
			r.code = ee.ExitCode()
		} else if err != nil {
			r.code = -1
		}
		close(r.done)
	}()
	e.T.Cleanup(func() {
		select {
		case <-r.done:
		default:
			_ = syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL)
			<-r.done
		}
	})
	return r
}

// wait waits for the script's end (a bounded time: a hang is a failure).
func (r *run) wait(t *testing.T, limit time.Duration) int {
	t.Helper()
	select {
	case <-r.done:
		return r.code
	case <-time.After(limit):
		t.Fatalf("%s did not end within %v\nstderr:\n%s", r.cmd.Path, limit, r.stderr.String())
	}
	return -1
}

// until polls cond (a state the test needs, read from the system) until it
// holds; the script's end or the limit fails the test.
func (e *env) until(r *run, what string, cond func() bool) {
	e.T.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		select {
		case <-r.done:
			e.T.Fatalf("the script ended (exit %d) before %s\nstderr:\n%s", r.code, what, r.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			e.T.Fatalf("no %s within 2 minutes\nstderr:\n%s", what, r.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (e *env) state() string {
	out, _ := e.SwCode("info")
	if i := strings.Index(out, "state: "); i >= 0 {
		return strings.Fields(out[i+len("state: "):])[0]
	}
	return ""
}

// pidFile reads the pid a command wrote (written whole: by a rename).
func pidFile(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

// marker is a command that writes its pid to DIR/marker and then sleeps:
// the test knows from the file that the command runs.
func marker(dir string) []string {
	m := filepath.Join(dir, "marker")
	return []string{"sh", "-c", `echo $$ >"$0.tmp" && mv "$0.tmp" "$0" && exec sleep 120`, m}
}

// TestRunTprofInterrupted: Ctrl-C (SIGINT to the process group), timeout's
// SIGTERM to the group, SIGHUP, and SIGTERM to run.tprof alone: the command
// stops, the trace is written and posted, the facility is off, and the
// exit code is 128+signal.
func TestRunTprofInterrupted(t *testing.T) {
	e := setup(t)
	for _, c := range []struct {
		name    string
		sig     syscall.Signal
		signame string
		group   bool
	}{
		{"INT to the group", syscall.SIGINT, "SIGINT", true},
		{"TERM to run.tprof", syscall.SIGTERM, "SIGTERM", false},
		{"HUP to the group", syscall.SIGHUP, "SIGHUP", true},
	} {
		dir := filepath.Join(e.Dir, strings.ReplaceAll(c.name, " ", "-"))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		// A hang-up reaches what a terminal started: the run starts with
		// SIGHUP at its default even when this test inherited it ignored
		// (nohup), as bash can trap no signal ignored at its start.
		args := append([]string{"--"}, marker(dir)...)
		var prefix []string
		if c.sig == syscall.SIGHUP {
			prefix = []string{"env", "--default-signal=HUP"}
		}
		r := e.startWith(prefix, dir, "run.tprof", args...)
		e.until(r, "command running with tracing on", func() bool {
			return pidFile(filepath.Join(dir, "marker")) > 0 && e.state() == "on"
		})
		cmdPID := pidFile(filepath.Join(dir, "marker"))
		target := r.cmd.Process.Pid
		if c.group {
			target = -target
		}
		if err := syscall.Kill(target, c.sig); err != nil {
			t.Fatal(err)
		}
		code := r.wait(t, 2*time.Minute)
		if want := 128 + int(c.sig); code != want {
			t.Errorf("%s: exit %d, want %d\nstderr:\n%s", c.name, code, want, r.stderr.String())
		}
		if syscall.Kill(cmdPID, 0) == nil {
			t.Errorf("%s: the command %d still runs", c.name, cmdPID)
		}
		if !strings.Contains(r.stderr.String(), "interrupted by "+c.signame) {
			t.Errorf("%s: no line saying it was interrupted:\n%s", c.name, r.stderr.String())
		}
		if _, err := nrm2.Open(filepath.Join(dir, "swtrace.nrm2")); err != nil {
			t.Errorf("%s: the trace was not written: %v", c.name, err)
		}
		if rep, err := os.ReadFile(filepath.Join(dir, "tprof.out")); err != nil || !bytes.Contains(rep, []byte("sleep")) {
			t.Errorf("%s: no report of the command: %v\n%s", c.name, err, rep)
		}
		if s := e.state(); s == "on" {
			t.Errorf("%s: the facility is left on", c.name)
		}
		if r.stdout.Len() != 0 {
			t.Errorf("%s: run.tprof wrote to the command's stdout: %q", c.name, r.stdout.String())
		}
	}
}

// TestRunTprofSecondsLeavesNormalMode: run.tprof -s streams its trace in
// continuous mode; a trace started by hand afterwards (swtrace init, on,
// off, get elsewhere) leaves run.tprof's swtrace.nrm2 as it was (left in
// cont mode, the facility streamed the new trace over it).
func TestRunTprofSecondsLeavesNormalMode(t *testing.T) {
	e := setup(t)
	dir := filepath.Join(e.Dir, "system")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	r := e.start(dir, "run.tprof", "-s", "0.2")
	if code := r.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("run.tprof -s 0.2: exit %d\n%s", code, r.stderr.String())
	}
	path := filepath.Join(dir, "swtrace.nrm2")
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"init", "-t", "1M"}, {"on"}, {"off"}, {"get", filepath.Join(e.Dir, "byhand.nrm2")}} {
		if out, code := e.SwCode(args...); code != 0 {
			t.Fatalf("swtrace %s: exit %d\n%s", strings.Join(args, " "), code, out)
		}
	}
	after, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(before, after) {
		t.Errorf("run.tprof's trace changed by a later trace by hand (%d bytes, now %d: %v)", len(before), len(after), err)
	}
	if _, err := nrm2.Open(filepath.Join(e.Dir, "byhand.nrm2")); err != nil {
		t.Errorf("the trace by hand: %v", err)
	}
}

// TestRunTprofCommandKilled: kill -9 of the traced command gives 137 and
// no line of the wrapper's internals.
func TestRunTprofCommandKilled(t *testing.T) {
	e := setup(t)
	r := e.start(e.Dir, "run.tprof", append([]string{"--"}, marker(e.Dir)...)...)
	e.until(r, "the command running", func() bool { return pidFile(filepath.Join(e.Dir, "marker")) > 0 })
	if err := syscall.Kill(pidFile(filepath.Join(e.Dir, "marker")), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if code := r.wait(t, 2*time.Minute); code != 137 {
		t.Errorf("exit %d, want 137 (the command's)\n%s", code, r.stderr.String())
	}
	if s := r.stderr.String(); regexp.MustCompile(`line \d+: +\d+ Killed`).MatchString(s) {
		t.Errorf("the wrapper's internals are shown:\n%s", s)
	}
	if _, err := os.Stat(filepath.Join(e.Dir, "tprof.out")); err != nil {
		t.Errorf("no report: %v", err)
	}
}

// TestRunTprofWarnsOnce: each of post's warnings reaches the user once: a
// module deleted before the trace is posted, and a buffer that filled
// (post says it, and run.tprof says it with the -t that would do).
func TestRunTprofWarnsOnce(t *testing.T) {
	e := setup(t)
	gone := filepath.Join(e.Dir, "burn-gone")
	r := e.start(e.Dir, "run.tprof", "--", "sh", "-c", `cp "$0" "$1" && "$1" 30 >/dev/null; rm -f "$1"`, e.Burn, gone)
	if code := r.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("run.tprof: exit %d\n%s", code, r.stderr.String())
	}
	if n := strings.Count(r.stderr.String(), "module not read"); n != 1 || !strings.Contains(r.stderr.String(), gone) {
		t.Errorf("the deleted module is warned of %d times, want once:\n%s", n, r.stderr.String())
	}
	dir := filepath.Join(e.Dir, "small")
	// 2 s of CPU at 1000 Hz: far more ticks than 16K holds, however busy
	// the machine (the work is fixed, not the time)
	r = e.start(e.Dir, "run.tprof", "-t", "16K", "-o", dir, "--", e.Burn, "200")
	if code := r.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("run.tprof -t 16K: exit %d\n%s", code, r.stderr.String())
	}
	if n := strings.Count(r.stderr.String(), "a buffer filled"); n != 1 || !regexp.MustCompile(`-t \d+M would have held it`).MatchString(r.stderr.String()) {
		t.Errorf("the full buffer is warned of %d times, want once with the -t that would do:\n%s", n, r.stderr.String())
	}
}

// TestRunTprofStdout: the command's stdout, exit code, signal dispositions
// and environment are what they are without run.tprof; the previous trace
// and report are kept as .old.
func TestRunTprofStdout(t *testing.T) {
	e := setup(t)
	in := filepath.Join(e.Dir, "in")
	var b bytes.Buffer
	for i := 0; b.Len() < 1<<20; i++ {
		b.WriteString(strconv.Itoa(i*i) + " perfinsp\n")
	}
	if err := os.WriteFile(in, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	direct := func(args ...string) []byte {
		c := exec.Command(args[0], args[1:]...)
		c.Env, c.Dir = e.Environ, e.Dir
		out, err := c.Output()
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return out
	}
	cases := [][]string{
		{"xz", "-c", in},
		{"grep", "^Sig[BIC]", "/proc/self/status"},
		{"sh", "-c", "env | grep -v '^_=' | sort"},
	}
	for i, args := range cases {
		want := direct(args...)
		r := e.start(e.Dir, "run.tprof", append([]string{"--"}, args...)...)
		if code := r.wait(t, 2*time.Minute); code != 0 {
			t.Fatalf("run.tprof -- %v: exit %d\n%s", args, code, r.stderr.String())
		}
		if !bytes.Equal(r.stdout.Bytes(), want) {
			t.Errorf("run.tprof -- %v: stdout differs from the command's own (%d bytes, want %d):\n%.300q\nwant:\n%.300q",
				args, r.stdout.Len(), len(want), r.stdout.String(), want)
		}
		if i > 0 && !strings.Contains(r.stderr.String(), "kept the previous swtrace.nrm2 tprof.out as .old") {
			t.Errorf("the previous trace was replaced without a word:\n%s", r.stderr.String())
		}
	}
	for _, f := range []string{"swtrace.nrm2.old", "tprof.out.old"} {
		if _, err := os.Stat(filepath.Join(e.Dir, f)); err != nil {
			t.Errorf("%s not kept: %v", f, err)
		}
	}
	r := e.start(e.Dir, "run.tprof", "--", "sh", "-c", "exit 7")
	if code := r.wait(t, 2*time.Minute); code != 7 {
		t.Errorf("exit %d, want the command's 7", code)
	}
}

// sigstate builds testdata/sigstate.c statically (a short ITrace: no
// dynamic loader).
func (e *env) sigstate() string {
	e.T.Helper()
	bin := filepath.Join(e.Bin, "sigstate")
	src := filepath.Join(tracetest.Root(), "scripts", "testdata", "sigstate.c")
	if out, err := exec.Command("gcc", "-O2", "-static", "-o", bin, src).CombinedOutput(); err != nil {
		e.T.Fatalf("build sigstate (static, libc6-dev): %v\n%s", err, out)
	}
	return bin
}

// sortedLines is b's lines in order (the environment's order is the
// shell's).
func sortedLines(b []byte) string {
	l := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	sort.Strings(l)
	return strings.Join(l, "\n")
}

// lineDiff lists the lines only in got (+) and only in want (-).
func lineDiff(got, want []byte) string {
	count := map[string]int{}
	for _, l := range strings.Split(string(want), "\n") {
		count[l]++
	}
	var out []string
	for _, l := range strings.Split(string(got), "\n") {
		if count[l] > 0 {
			count[l]--
			continue
		}
		out = append(out, "+ "+l)
	}
	for l, n := range count {
		for ; n > 0; n-- {
			out = append(out, "- "+l)
		}
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

// itraceEnds counts a trace's ITRACE_END records by reason.
func itraceEnds(t *testing.T, path string) map[uint64]int {
	t.Helper()
	f, err := nrm2.Open(path)
	if err != nil {
		t.Fatalf("the trace was not written: %v", err)
	}
	ends := map[uint64]int{}
	if err := f.Records(func(r *trace.Record) error {
		if r.Major == trace.MajorITraceU && r.Minor == trace.ITraceEnd {
			ends[r.Field(4)]++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return ends
}

// itraceSignals counts the ITrace signal records of a trace.
func itraceSignals(t *testing.T, path string) int {
	t.Helper()
	f, err := nrm2.Open(path)
	if err != nil {
		t.Fatalf("the trace was not written: %v", err)
	}
	n := 0
	if err := f.Records(func(r *trace.Record) error {
		if r.Major == trace.MajorITraceK && r.Minor == trace.ITraceSignal {
			n++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestRunITraceWhatTheProgramGets: the traced program gets the signal
// dispositions, mask and environment it has without run.itrace, its stdout
// is its own, no signal of the tool's shows in the trace, and the previous
// trace is kept as .old.
func TestRunITraceWhatTheProgramGets(t *testing.T) {
	e := setup(t)
	prog := e.sigstate()
	// As a shell runs it: PWD its directory, $_ its path.
	var environ []string
	for _, v := range e.Environ {
		if !strings.HasPrefix(v, "PWD=") && !strings.HasPrefix(v, "_=") {
			environ = append(environ, v)
		}
	}
	e.Environ = append(environ, "PWD="+e.Dir, "_="+prog)
	c := exec.Command(prog)
	c.Env, c.Dir = e.Environ, e.Dir
	want, err := c.Output()
	if err != nil {
		t.Fatal(err)
	}
	e.Sw("enable", "tprof", "dispatch") // left over from earlier work: run.itrace sets what it needs
	for i := 0; i < 2; i++ {
		r := e.start(e.Dir, "run.itrace", "--", prog)
		if code := r.wait(t, 5*time.Minute); code != 0 {
			t.Fatalf("run.itrace: exit %d\n%s", code, r.stderr.String())
		}
		if got := r.stdout.Bytes(); sortedLines(got) != sortedLines(want) {
			t.Errorf("the traced program's stdout (signals, environment) differs from a run without run.itrace:\n%s", lineDiff(got, want))
		}
		if n := itraceSignals(t, filepath.Join(e.Dir, "swtrace.nrm2")); n != 0 {
			t.Errorf("%d signals in the trace of a program that gets none", n)
		}
		if i == 1 && !strings.Contains(r.stderr.String(), "kept the previous swtrace.nrm2 arc itrace.out callgrind.out post.log as .old") {
			t.Errorf("the previous trace was replaced without a word:\n%s", r.stderr.String())
		}
	}
	if out := e.Sw("info"); !strings.Contains(out, "enabled: sys mte itrace\n") {
		t.Errorf("run.itrace left other record types enabled:\n%s", out)
	}
}

// TestRunITraceInterrupted: Ctrl-C (SIGINT to the group: the program gets
// it too) and SIGTERM to run.itrace alone (as timeout's first signal:
// ITrace lets the program go, its thread ending as "off" in the trace,
// before the signal is passed on): the program stops, and the trace is
// still written and posted.
func TestRunITraceInterrupted(t *testing.T) {
	e := setup(t)
	prog := e.sigstate()
	for _, c := range []struct {
		name    string
		sig     syscall.Signal
		signame string
		group   bool
		code    int
	}{
		{"INT to the group", syscall.SIGINT, "SIGINT", true, 130},
		{"TERM to run.itrace", syscall.SIGTERM, "SIGTERM", false, 143}, // let go first
		{"TERM to the group", syscall.SIGTERM, "SIGTERM", true, 143},   // as timeout sends it
		{"HUP to the group", syscall.SIGHUP, "SIGHUP", true, 129},      // the terminal closed
	} {
		dir := filepath.Join(e.Dir, strings.ReplaceAll(c.name, " ", "-"))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		m := filepath.Join(dir, "marker")
		var prefix []string
		if c.sig == syscall.SIGHUP {
			prefix = []string{"env", "--default-signal=HUP"} // as in TestRunTprofInterrupted
		}
		r := e.startWith(prefix, dir, "run.itrace", "--", prog, "spin", m)
		e.until(r, "the traced program running", func() bool { return pidFile(m) > 0 })
		target := r.cmd.Process.Pid
		if c.group {
			target = -target
		}
		if err := syscall.Kill(target, c.sig); err != nil {
			t.Fatal(err)
		}
		if code := r.wait(t, 3*time.Minute); code != c.code {
			t.Errorf("%s: exit %d, want %d\n%s", c.name, code, c.code, r.stderr.String())
		}
		if syscall.Kill(pidFile(m), 0) == nil {
			t.Errorf("%s: the program still runs", c.name)
		}
		if !strings.Contains(r.stderr.String(), "interrupted by "+c.signame) {
			t.Errorf("%s: no line saying it was interrupted:\n%s", c.name, r.stderr.String())
		}
		for _, f := range []string{"swtrace.nrm2", "itrace.out", "callgrind.out"} {
			if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
				t.Errorf("%s: %s not written: %v", c.name, f, err)
			}
		}
		if ends := itraceEnds(t, filepath.Join(dir, "swtrace.nrm2")); !c.group && (ends[trace.ITraceEndOff] == 0 || ends[trace.ITraceEndExit] != 0) {
			t.Errorf("%s: ITrace ends by reason %v: want the program let go (off) before it ended", c.name, ends)
		}
		if s := e.state(); s == "on" {
			t.Errorf("%s: the facility is left on", c.name)
		}
	}
}

// TestRunITraceCommandKilled: kill -9 of the traced program gives its 137,
// the trace of what it ran, and no line of the wrapper's internals.
func TestRunITraceCommandKilled(t *testing.T) {
	e := setup(t)
	prog := e.sigstate()
	m := filepath.Join(e.Dir, "marker")
	r := e.start(e.Dir, "run.itrace", "--", prog, "spin", m)
	e.until(r, "the traced program running", func() bool { return pidFile(m) > 0 })
	if err := syscall.Kill(pidFile(m), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if code := r.wait(t, 3*time.Minute); code != 137 {
		t.Errorf("exit %d, want the program's 137\n%s", code, r.stderr.String())
	}
	if s := r.stderr.String(); regexp.MustCompile(`line \d+: +\d+ Killed`).MatchString(s) {
		t.Errorf("the wrapper's internals are shown:\n%s", s)
	}
	if rep, err := os.ReadFile(filepath.Join(e.Dir, "itrace.out")); err != nil || !bytes.Contains(rep, []byte("instructions")) {
		t.Errorf("no itrace.out of what the program ran: %v\n%s", err, rep)
	}
	if s := e.state(); s == "on" {
		t.Error("the facility is left on")
	}
}

// TestRunITraceKilledLeavesNothing: kill -9 of run.itrace leaves none of
// its own helper processes behind (its progress printer polled the
// facility every 10 s for ever, starting the agent again each time).
func TestRunITraceKilledLeavesNothing(t *testing.T) {
	e := setup(t)
	prog := e.sigstate()
	m := filepath.Join(e.Dir, "marker")
	r := e.start(e.Dir, "run.itrace", "--", prog, "spin", m)
	e.until(r, "the traced program running", func() bool { return pidFile(m) > 0 })
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", r.cmd.Process.Pid, r.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	var helpers []int
	for _, f := range strings.Fields(string(b)) {
		if pid, _ := strconv.Atoi(f); pid > 0 && pid != pidFile(m) {
			helpers = append(helpers, pid)
		}
	}
	if len(helpers) == 0 {
		t.Fatal("run.itrace has no helper process: the case under test is gone")
	}
	if err := syscall.Kill(r.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = syscall.Kill(pidFile(m), syscall.SIGKILL) // (it holds the output pipes)
	// Each helper ends within one progress interval (10 s) of the kill.
	deadline := time.Now().Add(time.Minute)
	for _, pid := range helpers {
		for procState(pid) != "" && procState(pid) != "Z" {
			if time.Now().After(deadline) {
				b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
				_ = syscall.Kill(pid, syscall.SIGKILL)
				t.Fatalf("run.itrace's helper %d (%q) still runs a minute after run.itrace was killed", pid, b)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// procState is pid's state letter from /proc, "" when it is gone.
func procState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+3 <= len(s) {
		return s[i+2 : i+3]
	}
	return ""
}

// TestRunITraceBufferFills: a buffer that fills ends the trace early, but
// what was recorded is written and posted, the program's exit code kept.
func TestRunITraceBufferFills(t *testing.T) {
	e := setup(t)
	prog := e.sigstate()
	r := e.start(e.Dir, "run.itrace", "-t", "16K", "--", "sh", "-c", prog+" >/dev/null; exit 5")
	if code := r.wait(t, 5*time.Minute); code != 5 {
		t.Fatalf("exit %d, want the program's 5\n%s", code, r.stderr.String())
	}
	if !strings.Contains(r.stderr.String(), "a buffer filled") || !regexp.MustCompile(`-t \d+[KMG] holds`).MatchString(r.stderr.String()) {
		t.Errorf("a full buffer is not reported with a larger -t:\n%s", r.stderr.String())
	}
	rep, err := os.ReadFile(filepath.Join(e.Dir, "itrace.out"))
	if err != nil || !bytes.Contains(rep, []byte("instructions")) {
		t.Errorf("no itrace.out of what was recorded: %v\n%s", err, rep)
	}
	if s := e.state(); s == "on" {
		t.Error("the facility is left on")
	}
}

// TestRunITraceBounded: in command mode --max-insns ends the tracing
// after that many instructions and -s after that many seconds (printing
// progress meanwhile); the command then runs on natively to its end, its
// exit code kept, and what was traced is written and posted.
func TestRunITraceBounded(t *testing.T) {
	e := setup(t)
	// about 2,000 instructions an iteration: minutes single-stepped, a
	// moment natively
	loop := func(n, code int) []string {
		return []string{"sh", "-c", fmt.Sprintf("i=0; while [ $i -lt %d ]; do i=$((i+1)); done; exit %d", n, code)}
	}
	const max = 300000
	r := e.start(e.Dir, "run.itrace", append([]string{"--max-insns", strconv.Itoa(max), "--"}, loop(100000, 7)...)...)
	if code := r.wait(t, 5*time.Minute); code != 7 {
		t.Fatalf("--max-insns: exit %d, want the program's 7\n%s", code, r.stderr.String())
	}
	if !strings.Contains(r.stderr.String(), fmt.Sprintf("tracing ended at --max-insns %d", max)) {
		t.Errorf("--max-insns: no line saying the limit ended the tracing:\n%s", r.stderr.String())
	}
	rep, err := os.ReadFile(filepath.Join(e.Dir, "itrace.out"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`: (\d+) instructions,`).FindSubmatch(rep)
	if m == nil {
		t.Fatalf("itrace.out has no instruction count:\n%.400s", rep)
	}
	if n, _ := strconv.Atoi(string(m[1])); n < max || n > max+64 {
		t.Errorf("--max-insns %d: itrace.out holds %d instructions", max, n)
	}

	dir := filepath.Join(e.Dir, "seconds")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	r = e.start(dir, "run.itrace", append([]string{"-s", "12", "--"}, loop(100000, 6)...)...)
	if code := r.wait(t, 5*time.Minute); code != 6 {
		t.Fatalf("-s: exit %d, want the program's 6\n%s", code, r.stderr.String())
	}
	out := r.stderr.String()
	// progress in instructions traced so far (pitraced's tracer), with
	// the time left to the bound
	pm := regexp.MustCompile(`run\.itrace: 1\d s: (\d+) instructions traced \(\d+ a second, \d+ s to the 12 s limit\), \d+ records`).FindStringSubmatch(out)
	if !strings.Contains(out, "12 s: tracing stopped (-s)") || pm == nil {
		t.Fatalf("-s 12: no line saying the time ended the tracing, or no progress line in instructions:\n%s", out)
	}
	rep, err = os.ReadFile(filepath.Join(dir, "itrace.out"))
	if err != nil {
		t.Fatalf("-s: itrace.out not written: %v", err)
	}
	m = regexp.MustCompile(`: (\d+) instructions,`).FindSubmatch(rep)
	sofar, _ := strconv.Atoi(pm[1])
	if m == nil {
		t.Fatalf("itrace.out has no instruction count:\n%.400s", rep)
	}
	if all, _ := strconv.Atoi(string(m[1])); sofar == 0 || sofar > all {
		t.Errorf("-s 12: progress said %d instructions traced; itrace.out holds %d", sofar, all)
	}
	if s := e.state(); s == "on" {
		t.Error("the facility is left on")
	}
}

// TestCheckPrereqs: make's first step names a missing or older Go (go.mod's
// version) with the exact command that installs it, and passes this one.
func TestCheckPrereqs(t *testing.T) {
	script := filepath.Join(tracetest.Root(), "scripts", "check-prereqs.sh")
	run := func(goBin string) (string, int) {
		c := exec.Command("bash", script, "--go")
		c.Env = append(os.Environ(), "GO="+goBin)
		out, err := c.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); ok {
			return string(out), ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), 0
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatal(err)
	}
	if out, code := run(goBin); code != 0 {
		t.Errorf("the Go that runs this test is refused: %s", out)
	}
	old := filepath.Join(t.TempDir(), "go")
	if err := os.WriteFile(old, []byte("#!/bin/sh\n[ \"$1 $2\" = 'env GOVERSION' ] && echo go1.19.8\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, g := range []string{old, filepath.Join(t.TempDir(), "no-go-here")} {
		out, code := run(g)
		if code != 1 || !strings.Contains(out, "needs Go 1.26") || !strings.Contains(out, "https://go.dev/dl/go1.26") || !strings.Contains(out, "tar -C /usr/local -xz") {
			t.Errorf("GO=%s: exit %d:\n%s", g, code, out)
		}
	}
}

// TestMakeKmodNamesTheKernel: make kmod against headers of another kernel
// than the running one says which kernel the module is for and how to
// build it for this one; against the running kernel's it says nothing of
// the kind. (A stand-in kernel tree: its Makefile only echoes.)
func TestMakeKmodNamesTheKernel(t *testing.T) {
	uname, err := exec.Command("uname", "-r").Output()
	if err != nil {
		t.Fatal(err)
	}
	running := strings.TrimSpace(string(uname))
	for _, rel := range []string{"0.0.1-other", running} {
		kdir := t.TempDir()
		if err := os.MkdirAll(filepath.Join(kdir, "include", "generated"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(kdir, "include", "generated", "utsrelease.h"), []byte("#define UTS_RELEASE \""+rel+"\"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(kdir, "Makefile"), []byte("modules:\n\t@echo stand-in kbuild\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		c := exec.Command("make", "--no-print-directory", "kmod", "KDIR="+kdir)
		c.Dir = tracetest.Root()
		out, err := c.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "stand-in kbuild") {
			t.Fatalf("make kmod KDIR=%s: %v\n%s", kdir, err, out)
		}
		said := strings.Contains(string(out), "building pitrace.ko for kernel "+rel+" (headers "+kdir+"), not for the running kernel "+running) &&
			strings.Contains(string(out), "apt-get install linux-headers-"+running)
		if want := rel != running; said != want {
			t.Errorf("make kmod with the headers of %s on %s: said which kernel: %v, want %v\n%s", rel, running, said, want, out)
		}
	}
}

// TestRunTprofReclaimsOrphan: kill -9 of run.tprof leaves the facility on;
// the next run recognises that its owner is gone, reclaims it with a
// message and keeps the orphaned trace on disk.
func TestRunTprofReclaimsOrphan(t *testing.T) {
	e := setup(t)
	dir := filepath.Join(e.Dir, "killed")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	r := e.start(dir, "run.tprof", append([]string{"--"}, marker(dir)...)...)
	e.until(r, "command running with tracing on", func() bool {
		return pidFile(filepath.Join(dir, "marker")) > 0 && e.state() == "on"
	})
	if err := syscall.Kill(r.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = syscall.Kill(pidFile(filepath.Join(dir, "marker")), syscall.SIGKILL)
	r.wait(t, time.Minute)
	if s := e.state(); s != "on" {
		t.Fatalf("after kill -9 of run.tprof the facility is %q, want it left on (the case under test)", s)
	}
	next := e.start(e.Dir, "run.tprof", "--", "true")
	if code := next.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("the next run.tprof: exit %d\n%s", code, next.stderr.String())
	}
	if !strings.Contains(next.stderr.String(), "which died without stopping it: reclaiming it") {
		t.Errorf("the reclaim is not said:\n%s", next.stderr.String())
	}
	if _, err := nrm2.Open(filepath.Join(e.Dir, "swtrace.orphan.nrm2")); err != nil {
		t.Errorf("the orphaned trace was not kept: %v", err)
	}
	if s := e.state(); s == "on" {
		t.Error("the facility is left on")
	}
	// A run that is alive is not reclaimed from: busy, naming it.
	if err := os.MkdirAll(filepath.Join(dir, "live"), 0o755); err != nil {
		t.Fatal(err)
	}
	live := e.start(dir, "run.tprof", append([]string{"--"}, marker(filepath.Join(dir, "live"))...)...)
	e.until(live, "a second run tracing", func() bool {
		return pidFile(filepath.Join(dir, "live", "marker")) > 0 && e.state() == "on"
	})
	other := e.start(e.Dir, "run.tprof", "--", "true")
	if code := other.wait(t, 2*time.Minute); code != 3 || !strings.Contains(other.stderr.String(), "busy: run.tprof (pid ") {
		t.Errorf("beside a live run: exit %d\n%s", code, other.stderr.String())
	}
	_ = syscall.Kill(-live.cmd.Process.Pid, syscall.SIGINT)
	live.wait(t, 2*time.Minute)
}

// scriptsBeside copies the scripts into dir/scripts beside dir/bin (where
// they look for their tools) and builds swtrace and hookit there with the
// version string v.
func scriptsBeside(t *testing.T, dir, v string) string {
	t.Helper()
	build := exec.Command("go", "build", "-ldflags", "-X perfinsp/internal/cliutil.version="+v, "-o", filepath.Join(dir, "bin")+"/", "./tools/swtrace", "./tools/hookit")
	build.Dir = tracetest.Root()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	scripts := filepath.Join(dir, "scripts")
	if err := os.MkdirAll(scripts, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"run.tprof", "run.itrace", "run.hookit", "runlib.sh"} {
		b, err := os.ReadFile(filepath.Join(tracetest.Root(), "scripts", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(scripts, f), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return scripts
}

// runScript runs a script to its end (bounded) and returns its stdout,
// stderr and exit code. Its facility would be an agent of dir's that
// cannot start (no pitraced there): a script that went past its usage
// error reaches no other.
func runScript(t *testing.T, dir, path string, args ...string) (string, string, int) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	c := exec.Command(path, args...)
	c.Dir, c.Stdout, c.Stderr = dir, &stdout, &stderr
	c.Env = append(os.Environ(), "PERFINSP_SOCKET="+filepath.Join(dir, "run", "pitraced.sock"),
		"PERFINSP_PITRACED="+filepath.Join(dir, "bin", "no-pitraced"), "PERFINSP_BACKEND=daemon")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(2 * time.Minute):
		_ = c.Process.Kill()
		t.Fatalf("%s %q did not end within 2 minutes", path, args)
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return stdout.String(), stderr.String(), code
}

// TestScriptsVersionAndUsage: run.tprof, run.itrace and run.hookit answer
// --version with the version of the tools built with them, --help with
// their header (the exit codes included), and a usage error with one line
// pointing to --help that names the nearest option, before anything is
// set up.
func TestScriptsVersionAndUsage(t *testing.T) {
	dir := t.TempDir()
	const v = "v0-scripts-test"
	scripts := scriptsBeside(t, dir, v)
	for _, s := range []string{"run.tprof", "run.itrace", "run.hookit"} {
		path := filepath.Join(scripts, s)
		out, errs, code := runScript(t, dir, path, "--version")
		if code != 0 || out != s+" (perfinsp) "+v+"\n" || errs != "" {
			t.Errorf("%s --version: exit %d, stdout %q, stderr %q; want %q", s, code, out, errs, s+" (perfinsp) "+v+"\n")
		}
		out, errs, code = runScript(t, dir, path, "--help")
		if code != 0 || !strings.Contains(out, "Exit status:") || strings.Contains(out, "set -u") || strings.HasPrefix(out, "!") || errs != "" {
			t.Errorf("%s --help: exit %d, stderr %q, stdout:\n%s", s, code, errs, out)
		}
	}
	for _, c := range []struct {
		script string
		args   []string
		want   string
	}{
		{"run.tprof", []string{"--call-grpah", "dwarf", "--", "true"}, "run.tprof: unknown option --call-grpah: did you mean --call-graph? (run.tprof --help for more)\n"},
		{"run.tprof", []string{"--shced", "--", "true"}, "run.tprof: unknown option --shced: did you mean --sched? (run.tprof --help for more)\n"},
		{"run.tprof", []string{"-x", "--", "true"}, "run.tprof: unknown option -x (run.tprof --help for more)\n"},
		{"run.tprof", []string{"-r"}, "run.tprof: -r needs a value (run.tprof --help for more)\n"},
		{"run.tprof", []string{"-s", "abc"}, "run.tprof: -s takes a number of seconds (run.tprof --help for more)\n"},
		{"run.tprof", []string{"-s", "0.0"}, "run.tprof: -s takes a number of seconds above 0 (run.tprof --help for more)\n"},
		{"run.tprof", []string{"-s", "5", "--", "true"}, "run.tprof: -s SECONDS traces the whole system and takes no command: give either -s SECONDS or -- command (run.tprof --help for more)\n"},
		{"run.tprof", []string{"--call-graph", "lbr", "--", "true"}, "run.tprof: --call-graph takes fp or dwarf[,BYTES] (run.tprof --help for more)\n"},
		{"run.tprof", nil, "run.tprof: give a command after -- or -s SECONDS (run.tprof --help for more)\n"},
		{"run.itrace", []string{"--max-insn", "5", "--", "true"}, "run.itrace: unknown option --max-insn: did you mean --max-insns? (run.itrace --help for more)\n"},
		{"run.itrace", []string{"--step", "fast", "--", "true"}, "run.itrace: --step takes auto, breakpoint, single or verify (run.itrace --help for more)\n"},
		{"run.itrace", []string{"-p", "1"}, "run.itrace: -p PID takes -s SECONDS and no command (run.itrace --help for more)\n"},
		{"run.itrace", []string{"-p", "1", "-s", "0"}, "run.itrace: -s takes a number of seconds above 0 (run.itrace --help for more)\n"},
		{"run.itrace", []string{"-s", "0.00", "--", "true"}, "run.itrace: -s takes a number of seconds above 0 (run.itrace --help for more)\n"},
		{"run.hookit", []string{"-n", "--", "true"}, "run.hookit: unknown option -n (run.hookit --help for more)\n"},
		{"run.hookit", []string{"--metrc", "tsc", "--", "true"}, "run.hookit: unknown option --metrc (run.hookit --help for more)\n"},
		{"run.hookit", nil, "run.hookit: no program given: run.hookit [-m METRIC] [-o DIR] -- ./prog args (run.hookit --help for more)\n"},
	} {
		out, errs, code := runScript(t, dir, filepath.Join(scripts, c.script), c.args...)
		if code != 2 || errs != c.want || out != "" {
			t.Errorf("%s %q: exit %d, stdout %q, stderr %q; want 2 and %q", c.script, c.args, code, out, errs, c.want)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 2 {
		t.Errorf("a usage error left files behind: %v", ents)
	}
}
