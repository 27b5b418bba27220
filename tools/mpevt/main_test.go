package main

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"perfinsp/internal/testenv"

	"perfinsp/libperfutil/events"
)

// The test binary doubles as the workload: with MPEVT_WORKLOAD=1 it stops
// itself (so that both counters attach before it runs), then computes and
// sleeps in turns (CPU time and context switches), and exits.
func TestMain(m *testing.M) {
	if os.Getenv("MPEVT_WORKLOAD") == "1" {
		_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
		x := 0
		for r := 0; r < 40; r++ {
			for i := 0; i < 3_000_000; i++ {
				x += i ^ (x >> 3)
			}
			time.Sleep(2 * time.Millisecond)
		}
		if x == 42 {
			fmt.Println(x)
		}
		os.Exit(0)
	}
	if os.Getenv("MPEVT_RUN") == "1" { // the test binary as mpevt
		os.Exit(run(append([]string{"mpevt"}, os.Args[1:]...), os.Stdout, os.Stderr))
	}
	os.Exit(testenv.Run(m))
}

func runTool(args ...string) (string, string, int) {
	var out, errb bytes.Buffer
	rc := run(append([]string{"mpevt"}, args...), &out, &errb)
	return out.String(), errb.String(), rc
}

// perfFDs counts the perf_event file descriptors process pid holds.
func perfFDs(pid int) int {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, _ := os.ReadDir(dir)
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && strings.Contains(l, "perf_event") {
			n++
		}
	}
	return n
}

var totalLine = regexp.MustCompile(`(?m)^\s*(\d+) \S+\s+(\S+)$`)

func parseTotals(out string) map[string]float64 {
	m := map[string]float64{}
	i := strings.Index(out, "# mpevt: totals")
	if i < 0 {
		return m
	}
	for _, f := range totalLine.FindAllStringSubmatch(out[i:], -1) {
		v, _ := strconv.ParseFloat(f[1], 64)
		m[f[2]] = v
	}
	return m
}

// TestAgreesWithPerfStat counts task-clock and context-switches of one
// process with mpevt -p and perf stat -p at the same time; the totals must
// agree within 1 %.
func TestAgreesWithPerfStat(t *testing.T) {
	perf, err := exec.LookPath("perf")
	if err == nil {
		err = exec.Command(perf, "stat", "-e", "task-clock", "--", "true").Run()
	}
	if err != nil {
		testenv.Missing(t, "perf (linux-perf) is needed for this comparison: %v", err)
	}
	self, _ := os.Executable()
	w := exec.Command(self, "-test.run=^$")
	w.Env = append(os.Environ(), "MPEVT_WORKLOAD=1")
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	pid := w.Process.Pid
	defer w.Process.Kill()
	// every thread: one still on its way to the stop would switch out
	// with only mpevt's counters (open from its attach) counting
	testenv.WaitFor(t, "the workload to stop itself", func() bool { return testenv.AllStopped(pid) })
	threads, err := events.ThreadsOf(pid)
	if err != nil {
		t.Fatal(err)
	}
	const nev = 2

	// perf stat starts with its counters disabled (-D -1) and enables them
	// on "enable" through its control fifo, acknowledging when they count.
	dir := t.TempDir()
	ctl, ack := filepath.Join(dir, "ctl"), filepath.Join(dir, "ack")
	for _, f := range []string{ctl, ack} {
		if err := syscall.Mkfifo(f, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var perfOut bytes.Buffer
	p := exec.Command(perf, "stat", "-x", ",", "-e", "task-clock,context-switches", "-p", strconv.Itoa(pid),
		"-D", "-1", "--control", "fifo:"+ctl+","+ack)
	p.Stderr = &perfOut
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer p.Process.Kill()

	before := perfFDs(os.Getpid())
	type result struct {
		out, errs string
		rc        int
	}
	done := make(chan result, 1)
	go func() {
		o, e, rc := runTool("-e", "task-clock,context-switches", "-p", strconv.Itoa(pid))
		done <- result{o, e, rc}
	}()
	testenv.WaitFor(t, "mpevt to attach", func() bool { return perfFDs(os.Getpid())-before >= nev*len(threads) })
	if err := os.WriteFile(ctl, []byte("enable\n"), 0); err != nil {
		t.Fatalf("perf stat control fifo: %v", err)
	}
	af, err := os.Open(ack)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 3)
	if _, err := io.ReadFull(af, buf); err != nil || string(buf) != "ack" {
		t.Fatalf("perf stat did not acknowledge enable: %q %v", buf, err)
	}
	af.Close()
	if n := perfFDs(p.Process.Pid); n < nev*len(threads) {
		t.Fatalf("perf stat holds %d counters, want %d", n, nev*len(threads))
	}
	if err := w.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if err := w.Wait(); err != nil {
		t.Fatalf("workload: %v", err)
	}
	r := <-done
	if r.rc != 0 {
		t.Fatalf("mpevt exit %d: %s", r.rc, r.errs)
	}
	if err := p.Wait(); err != nil {
		t.Fatalf("perf stat: %v\n%s", err, perfOut.String())
	}
	mine := parseTotals(r.out)
	theirs := map[string]float64{}
	for _, line := range strings.Split(perfOut.String(), "\n") {
		f := strings.Split(line, ",")
		if len(f) < 3 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			continue
		}
		if f[1] == "msec" {
			v *= 1e6 // perf prints task-clock in ms
		}
		theirs[f[2]] = v
	}
	t.Logf("mpevt:\n%s\nperf stat -x,:\n%s", r.out, perfOut.String())
	for _, ev := range []string{"task-clock", "context-switches"} {
		a, ok1 := mine[ev]
		b, ok2 := theirs[ev]
		if !ok1 || !ok2 {
			t.Fatalf("%s missing: mpevt %v, perf %v", ev, mine, theirs)
		}
		if b == 0 || a == 0 {
			t.Fatalf("%s: mpevt %.0f, perf %.0f: the workload was not counted", ev, a, b)
		}
		diff := math.Abs(a-b) / b
		t.Logf("%s: mpevt %.0f, perf stat %.0f: %.4f %% apart", ev, a, b, 100*diff)
		if diff > 0.01 {
			t.Errorf("%s: mpevt %.0f and perf stat %.0f differ by %.2f %% (> 1 %%)", ev, a, b, 100*diff)
		}
	}
}

func TestCommandCountsAndExitCode(t *testing.T) {
	out, errs, rc := runTool("-e", "task-clock,page-faults", "--", "sh", "-c", "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; exit 3")
	if rc != 3 {
		t.Fatalf("exit %d (want the command's 3): %s", rc, errs)
	}
	if out != "" {
		t.Errorf("mpevt wrote into the command's stdout (beside a command its counts go to stderr): %q", out)
	}
	out = errs
	tot := parseTotals(out)
	if tot["task-clock"] < 1e6 || tot["page-faults"] < 1 {
		t.Errorf("counts of a busy shell loop: %v\n%s", tot, out)
	}
}

// Ctrl-C at the terminal (SIGINT to mpevt's process group) ends the
// count of a command: the totals are printed and the exit code is
// 128+SIGINT, also for a command that ignores SIGINT (mpevt ends it) and
// whatever the order in which mpevt sees the signal and the command's end.
func TestCommandInterrupted(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, trap := range []string{"", `trap "" INT; `} {
		marker := filepath.Join(t.TempDir(), "marker")
		c := exec.Command(self, "-e", "task-clock", "--", "sh", "-c", trap+`echo $$ >"$0.tmp" && mv "$0.tmp" "$0" && exec sleep 120`, marker)
		c.Env = append(os.Environ(), "MPEVT_RUN=1")
		var stdout, stderr bytes.Buffer
		c.Stdout, c.Stderr = &stdout, &stderr
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // a job of its own, as a shell starts it
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL) })
		testenv.WaitFor(t, "the command running", func() bool { _, err := os.Stat(marker); return err == nil })
		if err := syscall.Kill(-c.Process.Pid, syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		err := c.Wait()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		if code != 130 || !strings.Contains(stderr.String(), "# mpevt: totals") {
			t.Errorf("command %q interrupted: exit %d (%v), stderr %q; want 130 and the totals", trap, code, err, stderr.String())
		}
	}
}

func TestIntervalsAddUpToTotal(t *testing.T) {
	out, errs, rc := runTool("-e", "task-clock", "-i", "0.05", "--", "sh", "-c", "i=0; while [ $i -lt 60000 ]; do i=$((i+1)); done")
	if rc != 0 {
		t.Fatalf("exit %d: %s", rc, errs)
	}
	out += errs // beside a command the counts are on stderr
	var sum float64
	n := 0
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 4 && f[3] == "task-clock" {
			v, _ := strconv.ParseFloat(f[1], 64)
			sum += v
			n++
		}
	}
	total := parseTotals(out)["task-clock"]
	if n < 2 || total == 0 || sum != total {
		t.Errorf("%d interval lines summing to %.0f, total %.0f:\n%s", n, sum, total, out)
	}
}

func TestErrors(t *testing.T) {
	cases := []struct {
		args []string
		rc   int
		want string
	}{
		{[]string{"-e", "task-clock"}, 2, "nothing to count"},
		{[]string{"-p", "1"}, 2, "no events"},
		{[]string{"-e", "task-clock,bogus", "-p", "1"}, 2, `"bogus": unknown event`},
		{[]string{"-e", "cpu/evnt=1/", "-p", "1"}, 2, `"cpu"`},
		{[]string{"-e", "task-clock", "-p", "1", "-a"}, 2, "cannot be combined"},
		{[]string{"-e", "task-clock", "-p", "999999999"}, 1, "does not exist"},
		{[]string{"-e", "task-clock", "--", "/nonexistent/prog"}, 1, "/nonexistent/prog"},
	}
	for _, c := range cases {
		_, errs, rc := runTool(c.args...)
		if rc != c.rc || !strings.Contains(errs, c.want) || !strings.HasPrefix(errs, "mpevt: ") {
			t.Errorf("mpevt %q: exit %d %q; want exit %d and %q", c.args, rc, errs, c.rc, c.want)
		}
	}
}

func TestHardwareEventWithoutPMU(t *testing.T) {
	if events.HasPMU() {
		t.Skip("this machine has a hardware PMU")
	}
	_, errs, rc := runTool("-e", "instructions", "--", "true")
	if rc != 1 || !strings.Contains(errs, "no hardware PMU on this machine") || !strings.Contains(errs, "instructions") {
		t.Errorf("instructions without a PMU: exit %d %q", rc, errs)
	}
}

func TestList(t *testing.T) {
	out, errs, rc := runTool("-l")
	if rc != 0 {
		t.Fatalf("mpevt -l: exit %d %s", rc, errs)
	}
	for _, want := range []string{"task-clock", "context-switches", "L1-dcache-load-misses", "rHEX"} {
		if !strings.Contains(out, want) {
			t.Errorf("mpevt -l lacks %s", want)
		}
	}
	// software events are countable here and said so
	if !regexp.MustCompile(`(?m)^\s+task-clock\s+ok\s`).MatchString(out) {
		t.Errorf("task-clock not listed as countable:\n%s", out)
	}
	// every sysfs PMU of this machine is listed, with its format files
	pmus, err := events.System.PMUs()
	if err != nil {
		t.Skipf("no sysfs PMUs: %v", err)
	}
	for _, p := range pmus {
		if !strings.Contains(out, fmt.Sprintf("  %s (type %d,", p.Name, p.Type)) {
			t.Errorf("PMU %s missing from mpevt -l", p.Name)
		}
		for n, f := range p.Formats {
			if !strings.Contains(out, n+"="+f.Spec) {
				t.Errorf("format %s/%s missing", p.Name, n)
			}
		}
	}
	if events.HasPMU() == strings.Contains(out, "no hardware PMU on this machine") {
		t.Errorf("mpevt -l misstates the PMU (HasPMU %v)", events.HasPMU())
	}
}

// An event of a live sysfs PMU counts through the pmu/event/ syntax.
func TestSysfsPMUEventCounts(t *testing.T) {
	e, err := events.Parse("msr/tsc/")
	if err != nil {
		t.Skipf("no msr PMU with a tsc event here: %v", err)
	}
	fd, err := events.Open(e, 0, -1, events.OpenOpts{})
	if err != nil {
		t.Skipf("msr/tsc/ cannot be opened here: %v", err)
	}
	closeFD(fd)
	out, errs, rc := runTool("-e", "msr/tsc/", "--", "sh", "-c", "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done")
	out += errs // beside a command the counts are on stderr
	if rc != 0 || parseTotals(out)["msr/tsc/"] == 0 {
		t.Errorf("msr/tsc/: exit %d %s\n%s", rc, errs, out)
	}
}

// With libpfm4 installed, -l shows the PMUs it detects (loaded with dlopen);
// --pfm lists their events. perf_events' generic PMU is always detected.
func TestListLibpfm4(t *testing.T) {
	if _, err := pfmPMUs(false); err != nil {
		if os.Getenv("CI") == "true" && !strings.Contains(err.Error(), "without cgo") {
			t.Fatalf("libpfm4 (scripts/deps/hwevents.txt): %v", err)
		}
		t.Skipf("libpfm4 not usable here (apt-get install libpfm4; CI=true makes this a failure): %v", err)
	}
	out, _, rc := runTool("-l")
	if rc != 0 || !strings.Contains(out, "libpfm4 tables") || !regexp.MustCompile(`(?m)^  perf\s+perf_events generic PMU: \d+ events`).MatchString(out) {
		t.Errorf("mpevt -l with libpfm4:\n%s", out)
	}
	out, _, rc = runTool("-l", "--pfm")
	if rc != 0 || !strings.Contains(out, "perf::INSTRUCTIONS") {
		t.Errorf("mpevt -l --pfm does not list libpfm4's events (perf::INSTRUCTIONS)")
	}
}

// pfm:NAME is encoded by libpfm4: its generic perf PMU gives the same
// encoding as the project's table, and counts the same.
func TestPfmEncoding(t *testing.T) {
	if _, err := pfmPMUs(false); err != nil {
		if os.Getenv("CI") == "true" && !strings.Contains(err.Error(), "without cgo") {
			t.Fatalf("libpfm4 (scripts/deps/hwevents.txt): %v", err)
		}
		t.Skipf("libpfm4 not usable here: %v", err)
	}
	for name, want := range map[string]string{"perf::INSTRUCTIONS": "instructions", "perf::TASK-CLOCK": "task-clock", "perf::PERF_COUNT_SW_CONTEXT_SWITCHES": "cs"} {
		e, err := pfmEncode("pfm:"+name, name)
		w, _ := events.Lookup(want)
		if err != nil || e.Type != w.Type || e.Config != w.Config || e.Hardware != w.Hardware || e.Unit != w.Unit {
			t.Errorf("pfm:%s = %s hw %v unit %q, %v; want %s", name, e, e.Hardware, e.Unit, err, w)
		}
	}
	_, errs, rc := runTool("-e", "task-clock,pfm:nosuch::EVENT", "--", "true")
	if rc != 2 || !strings.Contains(errs, `"nosuch::EVENT": libpfm4: `) {
		t.Errorf("unknown libpfm4 event: exit %d %q", rc, errs)
	}
	out, errs, rc := runTool("-e", "pfm:perf::TASK-CLOCK,task-clock", "--", "sh", "-c", "i=0; while [ $i -lt 30000 ]; do i=$((i+1)); done")
	out += errs // beside a command the counts are on stderr
	tot := parseTotals(out)
	a, b := tot["pfm:perf::TASK-CLOCK"], tot["task-clock"]
	if rc != 0 || a == 0 || math.Abs(a-b)/b > 0.01 {
		t.Errorf("pfm:perf::TASK-CLOCK %.0f vs task-clock %.0f (exit %d %s)\n%s", a, b, rc, errs, out)
	}
}
