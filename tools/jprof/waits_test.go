package jprof_test

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/google/pprof/profile"
)

// agentProfile reads the agent's own profile of pid in dir (jprof-PID.pb.gz)
// and checks its sample types.
func agentProfile(t *testing.T, dir string, pid int, types ...string) *profile.Profile {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "jprof-"+strconv.Itoa(pid)+".pb.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		t.Fatalf("the agent's profile does not decode: %v", err)
	}
	var got []string
	for _, st := range p.SampleType {
		got = append(got, st.Type+"/"+st.Unit)
	}
	if strings.Join(got, " ") != strings.Join(types, " ") {
		t.Fatalf("sample types %v, want %v", got, types)
	}
	return p
}

// stackOf is a sample's stack root first, ';'-joined (the folded form).
func stackOf(s *profile.Sample) string {
	var fr []string
	for i := len(s.Location) - 1; i >= 0; i-- {
		for _, l := range s.Location[i].Line {
			fr = append(fr, l.Function.Name)
		}
	}
	return strings.Join(fr, ";")
}

// readFolded sums a folded file's values by stack.
func readFolded(t *testing.T, path string) map[string]int64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m := map[string]int64{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		i := strings.LastIndexByte(sc.Text(), ' ')
		v, err := strconv.ParseInt(sc.Text()[i+1:], 10, 64)
		if i <= 0 || err != nil {
			t.Fatalf("%s: bad line %q", path, sc.Text())
		}
		m[sc.Text()[:i]] += v
	}
	return m
}

// runWaitDemo runs WaitDemo under the agent with opts (dir= added) and
// returns its output, its pid and the directory of the profile.
func runWaitDemo(t *testing.T, opts string, args ...string) (string, int, string) {
	t.Helper()
	root := agentOnly(t)
	dir := t.TempDir()
	c := java(root, dir, opts+",dir="+dir, append([]string{"WaitDemo"}, args...)...)
	out, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("WaitDemo under %s: %v\n%s", opts, err, out)
	}
	t.Logf("%s", out)
	return string(out), c.Process.Pid, dir
}

func within(got, want, tol float64) bool { return got >= want*(1-tol) && got <= want*(1+tol) }

// The lock option: five contended entries of main into a monitor a holder
// keeps 200 ms each are five contentions of the stack main → lockTest →
// waitForLock, and their wait is what the program measured around them
// (within 10 %), in the pprof and the folded file alike.
func TestLockContention(t *testing.T) {
	out, pid, dir := runWaitDemo(t, "lock", "lock", "5", "200")
	m := regexp.MustCompile(`waited (\d+) ns in 5 contentions`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("WaitDemo did not say what it waited:\n%s", out)
	}
	waited, _ := strconv.ParseFloat(m[1], 64)
	if waited < 5*200e6*0.95 {
		t.Fatalf("WaitDemo waited %.0f ns: the holder did not hold the monitor", waited)
	}
	p := agentProfile(t, dir, pid, "lock-contentions/count", "lock-wait/nanoseconds")
	const stack = "WaitDemo.main;WaitDemo.lockTest;WaitDemo.waitForLock"
	var n, ns int64
	for _, s := range p.Sample {
		if stackOf(s) == stack {
			n += s.Value[0]
			ns += s.Value[1]
		}
	}
	t.Logf("agent: %d contentions, %d ns in %s; program: %.0f ns", n, ns, stack, waited)
	if n != 5 || !within(float64(ns), waited, 0.10) {
		t.Errorf("%s: %d contentions, %d ns waited; want 5 and %.0f ns ± 10 %%", stack, n, ns, waited)
	}
	if f := readFolded(t, filepath.Join(dir, "jprof-"+strconv.Itoa(pid)+"-lock.folded")); f[stack] != ns {
		t.Errorf("folded: %s %d ns, pprof %d", stack, f[stack], ns)
	}
}

// The wall option: a thread sleeping 2 s in sleepIn and one spinning as
// long in spin are both sampled all the time they ran: the sleeper's
// TIMED_WAITING stack and the spinner's RUNNABLE one each get about the
// time the program measured (within 15 %: the first and last intervals),
// in at most one sample per interval and as many for both. A round waits
// for a safepoint, which a busy machine delays by several intervals (every
// Java thread and the VM thread must get a CPU); its time is measured, so
// the totals hold, and only a round a second (50 intervals) is asked.
func TestWallClock(t *testing.T) {
	const ms = 20
	out, pid, dir := runWaitDemo(t, "wall="+strconv.Itoa(ms), "wall", "2000")
	m := regexp.MustCompile(`sleeper (\d+) ns, spinner (\d+) ns`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("WaitDemo did not say how long its threads ran:\n%s", out)
	}
	slept, _ := strconv.ParseFloat(m[1], 64)
	spun, _ := strconv.ParseFloat(m[2], 64)
	p := agentProfile(t, dir, pid, "wall-samples/count", "wall/nanoseconds")
	type key struct{ method, state string }
	n, ns := map[key]int64{}, map[key]int64{}
	for _, s := range p.Sample {
		st := s.Label["thread_state"]
		if len(st) != 1 {
			t.Fatalf("sample %s has thread_state %v", stackOf(s), st)
		}
		for _, meth := range []string{"WaitDemo.sleepIn", "WaitDemo.spin"} {
			if strings.Contains(";"+stackOf(s)+";", ";"+meth+";") {
				n[key{meth, st[0]}] += s.Value[0]
				ns[key{meth, st[0]}] += s.Value[1]
			}
		}
	}
	t.Logf("agent: %v samples, %v ns; program: sleeper %.0f ns, spinner %.0f ns", n, ns, slept, spun)
	for _, c := range []struct {
		k    key
		took float64
	}{{key{"WaitDemo.sleepIn", "TIMED_WAITING"}, slept}, {key{"WaitDemo.spin", "RUNNABLE"}, spun}} {
		rounds := c.took / (ms * 1e6)
		if !within(float64(ns[c.k]), c.took, 0.15) {
			t.Errorf("%s %s: %d ns of wall time, want %.0f ± 15 %%", c.k.method, c.k.state, ns[c.k], c.took)
		}
		if float64(n[c.k]) < rounds/50 || float64(n[c.k]) > rounds*1.1+2 {
			t.Errorf("%s %s: %d samples in %.0f intervals of %d ms", c.k.method, c.k.state, n[c.k], rounds, ms)
		}
	}
	// Every round samples both threads while both live: the difference of
	// their counts is the difference of their lives in rounds (the
	// sleeper's last sleep can end a few rounds after the spinner stopped).
	d := float64(n[key{"WaitDemo.sleepIn", "TIMED_WAITING"}] - n[key{"WaitDemo.spin", "RUNNABLE"}])
	if want := (slept - spun) / (ms * 1e6); d < want-2 || d > want+2 {
		t.Errorf("the sleeper sampled %d times, the spinner %d (%.1f rounds apart in the program's times): every round samples both",
			n[key{"WaitDemo.sleepIn", "TIMED_WAITING"}], n[key{"WaitDemo.spin", "RUNNABLE"}], want)
	}
	f := readFolded(t, filepath.Join(dir, "jprof-"+strconv.Itoa(pid)+"-wall.folded"))
	var sleeperFolded int64
	for st, v := range f {
		if strings.Contains(st, ";WaitDemo.sleepIn;") && strings.HasSuffix(st, ";[TIMED_WAITING]") {
			sleeperFolded += v
		}
	}
	if sleeperFolded != ns[key{"WaitDemo.sleepIn", "TIMED_WAITING"}] {
		t.Errorf("folded: the sleeper's TIMED_WAITING stacks %d ns, pprof %d", sleeperFolded, ns[key{"WaitDemo.sleepIn", "TIMED_WAITING"}])
	}
}
