package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"perfinsp/internal/testenv"

	"perfinsp/libperfutil/kmodbackend"
	"perfinsp/libperfutil/ptt"
)

var pttBin, agentBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "ptt-tool-test")
	if err != nil {
		panic(err)
	}
	_ = os.Chmod(dir, 0o755) // the nobody test runs the binary too
	pttBin = filepath.Join(dir, "ptt")
	agentBin = filepath.Join(dir, "pitraced")
	if out, err := exec.Command("go", "build", "-o", pttBin, ".").CombinedOutput(); err != nil {
		println("build ptt:", string(out))
		os.Exit(1)
	}
	build := exec.Command("go", "build", "-o", agentBin, "./daemon/cmd/pitraced")
	build.Dir = filepath.Join("..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		println("build pitraced:", string(out))
		os.Exit(1)
	}
	code := testenv.Run(m)
	os.RemoveAll(dir)
	os.Exit(code)
}

// agentEnv gives a test its own agent: a private socket (started on demand
// by ptt, as root) that the test shuts down at its end.
func agentEnv(t *testing.T) []string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "run", "pitraced.sock")
	t.Cleanup(func() { stopAgent(sock) })
	return append(os.Environ(), "PERFINSP_SOCKET="+sock, "PERFINSP_PITRACED="+agentBin)
}

// stopAgent kills the agent that wrote the state file next to sock.
func stopAgent(sock string) {
	b, err := os.ReadFile(sock + ".state")
	if err != nil {
		return
	}
	var st struct {
		PID int `json:"pid"`
	}
	if json.Unmarshal(b, &st) == nil && st.PID > 0 {
		_ = syscall.Kill(st.PID, syscall.SIGTERM)
	}
}

// runPtt runs the tool against the test's agent.
func runPtt(t *testing.T, env []string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(pttBin, args...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run ptt %v: %v", args, err)
	}
	return string(out), code
}

// dump reads ptt dump --json.
func dump(t *testing.T, env []string) ptt.Dump {
	t.Helper()
	out, code := runPtt(t, env, "dump", "--json")
	if code != 0 {
		t.Fatalf("ptt dump --json: exit %d: %s", code, out)
	}
	var d ptt.Dump
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatalf("dump JSON: %v\n%s", err, out)
	}
	return d
}

func schedRuntime(t *testing.T, pid int) uint64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/schedstat")
	if err != nil {
		t.Fatal(err)
	}
	v, err := strconv.ParseUint(strings.Fields(string(b))[0], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestDumpAndOffWhenNotOn(t *testing.T) {
	env := agentEnv(t)
	for _, cmd := range []string{"dump", "off"} {
		out, code := runPtt(t, env, cmd)
		if code != 1 || !strings.Contains(out, "ptt is not on: run ptt on first") {
			t.Errorf("ptt %s when off: exit %d, %q", cmd, code, out)
		}
	}
}

func TestBadMetrics(t *testing.T) {
	sock := agentEnv(t)
	out, code := runPtt(t, sock, "on", "-m", "task-clock,bogus")
	if code == 0 || !strings.Contains(out, `unknown metric "bogus"`) || !strings.Contains(out, "task-clock") {
		t.Errorf("unknown metric: exit %d, %q", code, out)
	}
	out, code = runPtt(t, sock, "on", "-m", "task-clock,cpu-clock,context-switches,cpu-migrations,page-faults,minor-faults,major-faults,cycles,instructions")
	if code == 0 || !strings.Contains(out, "at most 8") {
		t.Errorf("9 metrics: exit %d, %q", code, out)
	}
	if ptt.HasPMU() {
		t.Log("this machine has a hardware PMU: the no-PMU message is not checked")
		return
	}
	out, code = runPtt(t, sock, "on", "-m", "instructions")
	if code == 0 || !strings.Contains(out, "no hardware PMU on this machine: metric instructions needs a hardware counter") {
		t.Errorf("hardware metric: exit %d, %q", code, out)
	}
}

func TestOnDumpOff(t *testing.T) {
	sock := agentEnv(t)
	child := exec.Command("sh", "-c", "while :; do :; done")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
	pid := child.Process.Pid
	_ = syscall.Kill(pid, syscall.SIGSTOP)

	out, code := runPtt(t, sock, "on", "-m", "task-clock,page-faults", "-p", strconv.Itoa(pid))
	if code != 0 {
		t.Fatalf("ptt on: exit %d: %s", code, out)
	}
	defer runPtt(t, sock, "off")
	t.Log(strings.TrimSpace(out))
	if out, code := runPtt(t, sock, "on", "-p", strconv.Itoa(pid)); code == 0 || !strings.Contains(out, "already on") {
		t.Errorf("second ptt on: exit %d, %q", code, out)
	}

	// Count 300 ms of the child's running, frozen with SIGSTOP around it,
	// and compare the task-clock the dump shows for that window with the
	// scheduler's run time. The 1 % agreement of the read itself is
	// libperfutil/ptt's test; one window here is held to 5 %, and, as
	// there, a window hit by a hypervisor steal burst (+6 % seen once on
	// an otherwise idle CI run) is measured again, up to three windows.
	var d ptt.Dump
	var th ptt.ThreadDump
	var tc, prev uint64 // task-clock at the end of this / the previous window
	for window := 1; ; window++ {
		s0 := schedRuntime(t, pid)
		_ = syscall.Kill(pid, syscall.SIGCONT)
		testenv.WaitFor(t, "300 ms of the child's running", func() bool { return schedRuntime(t, pid)-s0 >= 300e6 })
		_ = syscall.Kill(pid, syscall.SIGSTOP)
		testenv.WaitFor(t, "the child to stop", func() bool { return procState(pid) == "T" })
		s1 := schedRuntime(t, pid)

		d = dump(t, sock)
		if len(d.Threads) != 1 || d.Threads[0].Tid != pid || d.Threads[0].Name != "sh" {
			t.Fatalf("threads: %+v", d.Threads)
		}
		th = d.Threads[0]
		if th.Dispatches == nil {
			t.Fatalf("no dispatch count as root")
		}
		tc = th.Values["task-clock"]
		got, ran := float64(tc-prev), float64(s1-s0)
		diff := 100 * (got - ran) / ran
		t.Logf("window %d: task-clock %.0f ns, scheduler run time %.0f ns (difference %+.3f %%), dispatches %d", window, got, ran, diff, *th.Dispatches)
		if tc >= prev && ran >= 50e6 && math.Abs(diff) <= 5 {
			break
		}
		if window == 3 {
			t.Fatalf("task-clock in the dump disagrees with the scheduler's run time by more than 5 %% in three windows (last %+.3f %%)", diff)
		}
		prev = tc
	}
	if *th.Dispatches == 0 {
		t.Errorf("no dispatch counted for a thread that was stopped and continued")
	}
	if th.Interrupts != nil || th.InterruptTime != nil || d.CPUs != nil || d.Guarantees.InterruptsFactoredOut {
		t.Errorf("the daemon backend must not report interrupt data: %+v", d)
	}
	out, _ = runPtt(t, sock, "dump")
	for _, want := range []string{"DISPATCHES", "INTERRUPTS", "n/a", "not available on the daemon backend", "NOT factored out", strconv.Itoa(pid)} {
		if !strings.Contains(out, want) {
			t.Errorf("text dump lacks %q:\n%s", want, out)
		}
	}
	t.Logf("text dump:\n%s", out)

	// The values outlive the process.
	_ = child.Process.Kill()
	_ = child.Wait()
	var d2 ptt.Dump
	testenv.WaitFor(t, "the exit to show in the dump", func() bool { d2 = dump(t, sock); return len(d2.Threads) == 1 && d2.Threads[0].Exited })
	if d2.Threads[0].Values["task-clock"] < tc {
		t.Errorf("after exit: %+v", d2.Threads)
	}
	if out, code := runPtt(t, sock, "off"); code != 0 || !strings.Contains(out, "ptt off") {
		t.Errorf("ptt off: exit %d %q", code, out)
	}
	if out, code := runPtt(t, sock, "dump"); code != 1 || !strings.Contains(out, "ptt is not on") {
		t.Errorf("dump after off: exit %d %q", code, out)
	}
}

// shortThreads starts 20 threads one after another, each running 30 ms of
// CPU time and exiting, after a line on stdin; it prints each thread's tid.
const shortThreads = `
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>
static double cpu(void) { struct timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); return t.tv_sec + t.tv_nsec / 1e9; }
static void *run(void *a) {
	(void)a;
	printf("%ld\n", (long)syscall(SYS_gettid));
	fflush(stdout);
	double t0 = cpu();
	while (cpu() - t0 < 0.030)
		;
	return NULL;
}
int main(void) {
	char line[8];
	if (!fgets(line, sizeof line, stdin))
		return 1;
	for (int i = 0; i < 20; i++) {
		pthread_t t;
		pthread_create(&t, NULL, run, NULL);
		pthread_join(t, NULL);
	}
	return 0;
}
`

// Threads created after ptt on are counted from their start, however short
// they live: 20 threads of 30 ms each, every tid in the dump with its own
// task-clock (the process connector; a /proc rescan every 200 ms would
// miss most of them).
func TestShortThreadsAreCounted(t *testing.T) {
	testenv.NeedRoot(t, "(the process connector)")
	dir := t.TempDir()
	src, bin := filepath.Join(dir, "short.c"), filepath.Join(dir, "short")
	if err := os.WriteFile(src, []byte(shortThreads), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-O2", "-pthread", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v %s", err, out)
	}
	// A thread whose 30 ms end before the agent, starved on a loaded
	// machine, has read the connector's event is not counted: a run that
	// misses one is repeated, up to three in all, each logged; a connector
	// path that does not work misses threads in all three.
	for attempt := 1; attempt <= 3; attempt++ {
		if shortThreadsAttempt(t, bin, attempt, attempt == 3) {
			return
		}
	}
}

// shortThreadsAttempt runs the helper's 20 short threads under ptt once;
// problems are errors only when final.
func shortThreadsAttempt(t *testing.T, bin string, attempt int, final bool) bool {
	report := t.Logf
	if final {
		report = t.Errorf
	}
	env := agentEnv(t)
	child := exec.Command(bin)
	stdin, _ := child.StdinPipe()
	var out strings.Builder
	child.Stdout = &out
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
	pid := child.Process.Pid
	if o, code := runPtt(t, env, "on", "-m", "task-clock", "-p", strconv.Itoa(pid)); code != 0 {
		t.Fatalf("ptt on: %s", o)
	}
	defer runPtt(t, env, "off")
	stdin.Write([]byte("go\n"))
	if err := child.Wait(); err != nil {
		t.Fatal(err)
	}
	tids := strings.Fields(out.String())
	if len(tids) != 20 {
		t.Fatalf("the helper printed %d tids", len(tids))
	}
	d := dump(t, env)
	byTid := map[int]ptt.ThreadDump{}
	for _, th := range d.Threads {
		byTid[th.Tid] = th
	}
	bad := 0
	var counted []string
	for _, s := range tids {
		tid, _ := strconv.Atoi(s)
		th, ok := byTid[tid]
		if !ok {
			bad++
			report("attempt %d: thread %d (30 ms) is not in the dump", attempt, tid)
			continue
		}
		v := th.Values["task-clock"]
		if v == 0 || v > 200e6 {
			bad++
			report("attempt %d: thread %d: task-clock %d ns for 30 ms of CPU time", attempt, tid, v)
		}
		// What was not counted (the thread ran before the agent found it)
		// is reported beside the count, so the two cover the thread's 30 ms.
		var unc uint64
		if th.UncountedStartNs == nil {
			bad++
			report("attempt %d: thread %d: created after ptt on, but its uncounted start is not reported", attempt, tid)
		} else {
			unc = *th.UncountedStartNs
		}
		if all := v + unc; all < 29e6 {
			bad++
			report("attempt %d: thread %d: task-clock %d ns + %d ns uncounted for 30 ms of CPU time", attempt, tid, v, unc)
		}
		counted = append(counted, fmt.Sprintf("%.1f+%.1f", float64(v)/1e6, float64(unc)/1e6))
	}
	// How much of each thread's 30 ms was counted shows the delay between
	// the thread's creation and the counter's (the connector's latency).
	t.Logf("attempt %d: %d of 20 short threads counted, ms each (counted+uncounted start): %s; new threads: %s", attempt, len(counted), strings.Join(counted, " "), d.NewThreads)
	return bad == 0
}

func TestNonRootCannotWatchRoot(t *testing.T) {
	testenv.NeedRoot(t, "to switch to the nobody user")
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		testenv.Missing(t, "setpriv is not installed (apt-get install util-linux)")
	}
	cmd := exec.Command(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", pttBin, "on", "-p", "1")
	cmd.Env = nobodyEnv(t)
	out, err := cmd.CombinedOutput()
	t.Logf("nobody: ptt on -p 1: %s", strings.TrimSpace(string(out)))
	if err == nil {
		t.Fatalf("nobody could watch pid 1: %s", out)
	}
	if !strings.Contains(string(out), "permission denied") {
		t.Errorf("want a permission error, got %q", out)
	}
}

func TestNonRootOwnProcess(t *testing.T) {
	testenv.NeedRoot(t, "to switch to the nobody user")
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		testenv.Missing(t, "setpriv is not installed (apt-get install util-linux)")
	}
	nobody := []string{"--reuid=65534", "--regid=65534", "--clear-groups"}
	child := exec.Command(setpriv, append(nobody, "sh", "-c", "while :; do :; done")...)
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
	env := nobodyEnv(t)
	as := func(args ...string) (string, error) {
		cmd := exec.Command(setpriv, append(nobody, append([]string{pttBin}, args...)...)...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	testenv.WaitFor(t, "setpriv to exec sh", func() bool { return comm(child.Process.Pid) == "sh" })
	pid := strconv.Itoa(child.Process.Pid)
	if out, err := as("on", "-p", pid); err != nil {
		t.Fatalf("nobody: ptt on -p own process: %v: %s", err, out)
	}
	defer as("off")
	s0 := schedRuntime(t, child.Process.Pid)
	testenv.WaitFor(t, "300 ms of the child's running", func() bool { return schedRuntime(t, child.Process.Pid)-s0 >= 300e6 })
	out, err := as("dump", "--json")
	if err != nil {
		t.Fatalf("dump: %v %s", err, out)
	}
	var d ptt.Dump
	if err := json.Unmarshal([]byte(out), &d); err != nil || len(d.Threads) != 1 {
		t.Fatalf("dump: %v %s", err, out)
	}
	th := d.Threads[0]
	t.Logf("nobody's own process: task-clock %d, dispatches %v, notes %v", th.Values["task-clock"], th.Dispatches, d.Guarantees.Notes)
	if th.Values["task-clock"] < 50e6 {
		t.Errorf("task-clock %d after 300 ms of a busy loop", th.Values["task-clock"])
	}
	if ptt.Paranoid() >= 2 && th.Dispatches != nil {
		t.Errorf("dispatches %d reported although kernel-mode counting is forbidden (they would be 0)", *th.Dispatches)
	}
	if out, err := as("off"); err != nil {
		t.Errorf("off: %v %s", err, out)
	}
}

// nobodyEnv is the environment of a ptt run as nobody: no system agent is
// reachable, so ptt starts nobody's own agent under a private TMPDIR, which
// the test stops at its end.
func nobodyEnv(t *testing.T) []string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ptt-nobody")
	if err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(dir, os.ModeSticky|0o777) // like /tmp
	t.Cleanup(func() {
		stopAgent(filepath.Join(dir, "perfinsp-65534", "pitraced.sock"))
		os.RemoveAll(dir)
	})
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "PERFINSP_SOCKET=") && !strings.HasPrefix(e, "TMPDIR=") && !strings.HasPrefix(e, "XDG_RUNTIME_DIR=") {
			env = append(env, e)
		}
	}
	return append(env, "TMPDIR="+dir, "PERFINSP_PITRACED="+agentBin, "PERFINSP_SOCKET="+filepath.Join(dir, "no-system-agent.sock"))
}

func comm(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	return strings.TrimSpace(string(b))
}

func procState(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+3 <= len(s) {
		return s[i+2 : i+3]
	}
	return ""
}

// Errors say what is wrong and what to do, with ptt's prefix: an unknown
// metric, tsc without the module (which ptt info marks as needing it), an
// unknown option (one line, the nearest option named).
func TestErrorsSayWhatToDo(t *testing.T) {
	env := agentEnv(t)
	out, code := runPtt(t, env, "on", "-m", "bogus")
	if code != 2 || !strings.HasPrefix(out, `ptt: unknown metric "bogus"`) {
		t.Errorf("ptt on -m bogus: exit %d, %q", code, out)
	}
	for _, args := range [][]string{{"--backend", "bogus", "info"}, {"--backend", "bogus", "on"}, {"--backend", "bogus", "dump"}} {
		out, code = runPtt(t, env, args...)
		if code != 2 || out != "ptt: --backend \"bogus\" (or $PERFINSP_BACKEND): use kmod, daemon or auto (ptt --help for more)\n" {
			t.Errorf("ptt %q: exit %d, %q; want a usage error", args, code, out)
		}
	}
	out, code = runPtt(t, env, "on", "--pdi", "1")
	if code != 2 || out != "ptt on: unknown option --pdi: did you mean --pid? (ptt on --help for more)\n" {
		t.Errorf("ptt on --pdi: exit %d, %q", code, out)
	}
	if _, err := os.Stat(kmodbackend.Device); err == nil {
		t.Log("the pitrace module is loaded: tsc without it is not checked")
		return
	}
	out, code = runPtt(t, env, "on", "-m", "tsc")
	if code != 1 || !strings.HasPrefix(out, "ptt: metric tsc needs the pitrace module") || !strings.Contains(out, "cpu-clock") {
		t.Errorf("ptt on -m tsc without the module: exit %d, %q", code, out)
	}
	out, code = runPtt(t, env, "info")
	if code != 0 || !regexp.MustCompile(`metric tsc .*needs the pitrace module`).MatchString(out) {
		t.Errorf("ptt info does not say that tsc needs the module: exit %d\n%s", code, out)
	}
}
