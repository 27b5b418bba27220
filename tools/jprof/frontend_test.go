package jprof_test

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"perfinsp/analysis/a2n"
	"perfinsp/internal/testenv"
)

// frontEnd builds bin/jprof (tools/jprof/cmd/jprof) besides the agent.
func frontEnd(t *testing.T) string {
	t.Helper()
	root := agentOnly(t)
	need(t, "jcmd")
	gob := exec.Command("go", "build", "-o", filepath.Join(root, "bin")+"/", "./tools/jprof/cmd/jprof")
	gob.Dir = root
	if out, err := gob.CombinedOutput(); err != nil {
		t.Fatalf("go build jprof: %v\n%s", err, out)
	}
	return root
}

// waitingDemo starts `JProfDemo wait` (its hot loop until stdin ends) with
// env and returns its pid, its stdin and its stderr so far.
func waitingDemo(t *testing.T, root, dir string, env []string) (int, io.WriteCloser, func() string, *exec.Cmd) {
	t.Helper()
	c := exec.Command("java", "-cp", filepath.Join(root, "build", "java"), "JProfDemo", "wait")
	c.Env, c.Dir = env, dir
	stdin, err := c.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	c.Stderr = &stderr
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	pid, perr := strconv.Atoi(strings.TrimPrefix(strings.TrimSpace(line), "pid "))
	if err != nil || perr != nil {
		t.Fatalf("JProfDemo wait: %q %v\n%s", line, err, stderr.String())
	}
	return pid, stdin, stderr.String, c
}

// jprof --pid on a running JVM (no agent at its start): the first attach
// (tprof,wall) records for its --duration and detaches, naming on stderr
// the Java stacks file and the wall profile, which hold JProfDemo's
// frames; a second attach with other options (lock,wall) works and is
// stopped by Ctrl-C (SIGINT), its profile having both kinds; the JVM then
// ends normally. Another user cannot attach: one line says why.
func TestFrontEndAttach(t *testing.T) {
	root := frontEnd(t)
	dir := t.TempDir()
	// the agent's tprof records have no daemon to go to: it says so, the JVM runs on
	env := append(os.Environ(), "PERFINSP_SOCKET="+filepath.Join(dir, "no-daemon.sock"))
	pid, stdin, jvmErr, jvm := waitingDemo(t, root, dir, env)
	p := strconv.Itoa(pid)
	jprof := filepath.Join(root, "bin", "jprof")

	out, err := exec.Command(jprof, "--pid", p, "--dir", dir, "--duration", "2s", "tprof,wall=20").CombinedOutput()
	t.Logf("jprof, first attach:\n%s", out)
	if err != nil {
		t.Fatalf("jprof --pid %s tprof,wall=20: %v\n%s\nthe JVM's stderr:\n%s", p, err, out, jvmErr())
	}
	pb := filepath.Join(dir, "jprof-"+p+".pb.gz")
	jstk := filepath.Join(dir, "jprof-"+p+".jstk")
	for _, f := range []string{pb, jstk, filepath.Join(dir, "jprof-"+p+"-wall.folded")} {
		if !strings.Contains(string(out), ": "+f+"\n") {
			t.Errorf("jprof did not name %s:\n%s", f, out)
		}
	}
	prof := agentProfile(t, dir, pid, "wall-samples/count", "wall/nanoseconds")
	demo := 0
	for _, s := range prof.Sample {
		if strings.Contains(stackOf(s), "JProfDemo.main") {
			demo++
		}
	}
	if demo == 0 {
		t.Errorf("the wall profile of the attach has no stack of JProfDemo.main: %d samples", len(prof.Sample))
	}
	b, err := os.ReadFile(jstk)
	if err != nil {
		t.Fatal(err)
	}
	js, err := a2n.ParseJavaStacks(b)
	if err != nil {
		t.Fatalf("the Java stacks of the attach: %v", err)
	}
	inDemo := 0
	for _, tid := range js.Threads() {
		for _, s := range js.Samples(tid) {
			if len(s.Frames) > 0 && strings.HasPrefix(js.Methods[s.Frames[0]], "JProfDemo.") {
				inDemo++
			}
		}
	}
	if inDemo == 0 {
		t.Errorf("the Java stacks of the attach have no sample in JProfDemo's methods")
	}
	first, err := os.Stat(pb)
	if err != nil {
		t.Fatal(err)
	}

	// Attach again, other options, until Ctrl-C once jprof said it attached.
	c := exec.Command(jprof, "--pid", p, "--dir", dir, "lock,wall=20")
	stderr, err := c.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(stderr)
	line, err := rd.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "jprof: attached to pid "+p) {
		rest, _ := io.ReadAll(rd)
		_ = c.Wait()
		t.Fatalf("the second attach: %q %v\n%s\nthe JVM's stderr:\n%s", line, err, rest, jvmErr())
	}
	// --flush: the profile so far, both kinds, the recording going on
	if out, err := exec.Command(jprof, "--pid", p, "--flush").CombinedOutput(); err != nil || !strings.Contains(string(out), "wrote its profile") {
		t.Errorf("jprof --flush: %v\n%s", err, out)
	}
	agentProfile(t, dir, pid, "lock-contentions/count", "lock-wait/nanoseconds", "wall-samples/count", "wall/nanoseconds")
	if err := c.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(rd)
	if err := c.Wait(); err != nil {
		t.Fatalf("jprof after Ctrl-C: %v\n%s%s", err, line, rest)
	}
	t.Logf("jprof, second attach:\n%s%s", line, rest)
	if !strings.Contains(string(rest), "detached from pid "+p) || !strings.Contains(string(rest), ": "+pb+"\n") {
		t.Errorf("the second attach's end:\n%s", rest)
	}
	if st, err := os.Stat(pb); err != nil || st.ModTime().Equal(first.ModTime()) && st.Size() == first.Size() {
		t.Errorf("the second attach did not write its profile: %v", err)
	}
	agentProfile(t, dir, pid, "lock-contentions/count", "lock-wait/nanoseconds", "wall-samples/count", "wall/nanoseconds")

	if os.Geteuid() == 0 {
		nobodyAttach(t, root, p)
	} else {
		t.Log("not checked here: another user's attach (the test runs jprof as nobody, which needs root)")
	}
	stdin.Close()
	if err := jvm.Wait(); err != nil {
		t.Fatalf("the JVM after the attaches: %v\n%s", err, jvmErr())
	}
	if strings.Contains(jvmErr(), "already attached") || strings.Contains(jvmErr(), "bad options") {
		t.Errorf("the agent refused an attach:\n%s", jvmErr())
	}
}

// nobodyAttach runs jprof as nobody on root's JVM: refused, one line
// naming both users, exit 1.
func nobodyAttach(t *testing.T, root, pid string) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"jprof", "libjprof.so"} {
		b, err := os.ReadFile(filepath.Join(root, "bin", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(bin, f), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	testenv.OpenPathTo(t, bin)
	c := exec.Command(filepath.Join(bin, "jprof"), "--pid", pid, "--duration", "1s", "wall")
	c.Dir = bin
	// jcmd's own JVM leaves no hsperfdata_nobody behind
	c.Env = append(os.Environ(), "JAVA_TOOL_OPTIONS=-XX:-UsePerfData", "HOME="+bin)
	c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := c.CombinedOutput()
	t.Logf("jprof as nobody:\n%s", out)
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if !strings.HasPrefix(l, "Picked up JAVA_TOOL_OPTIONS") {
			lines = append(lines, l)
		}
	}
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || len(lines) != 1 ||
		!strings.Contains(lines[0], "runs as uid 0, you are uid 65534") || !strings.Contains(lines[0], "run jprof as that user") {
		t.Errorf("jprof as nobody on root's JVM: %v, want exit 1 and one line naming both users:\n%s", err, out)
	}
}

// flushDemo is a program of two phases: main → phase → step → leaf, 100
// steps, a line "phase 1 done", a line read from stdin, 150 steps more.
func flushDemo(t *testing.T, dir string) {
	t.Helper()
	src := `public class FlushDemo {
    static long n;
    static void leaf() { n++; }
    static void step() { leaf(); leaf(); }
    static void phase(int k) { for (int i = 0; i < k; i++) step(); }
    public static void main(String[] args) throws Exception {
        phase(100);
        System.out.println("phase 1 done");
        System.out.flush();
        new java.io.BufferedReader(new java.io.InputStreamReader(System.in)).readLine();
        phase(150);
        System.out.println("FlushDemo done " + n);
    }
}
`
	if err := os.WriteFile(filepath.Join(dir, "FlushDemo.java"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("javac", "-d", dir, filepath.Join(dir, "FlushDemo.java")).CombinedOutput(); err != nil {
		t.Fatalf("javac: %v\n%s", err, out)
	}
}

// logNodes is log-rt's call counts by thread and call path.
func logNodes(text string) map[string]int64 {
	nodes := map[string]int64{}
	for _, s := range logSections(text) {
		var path []string
		for _, r := range s.rows {
			if r.lv < len(path) {
				path = path[:r.lv]
			}
			for len(path) < r.lv {
				path = append(path, "?")
			}
			path = append(path, r.name)
			nodes[s.tid+" "+strings.Join(path, ";")] += r.calls
		}
	}
	return nodes
}

// rtdriver flush on a calltree JVM writes PI's reports (log-rt, log-gen,
// pprof, folded) and the lock/wall profile of what was recorded so far,
// before it answers, without another command; at the JVM's end the same
// files hold the whole run, of which the flushed counts are a prefix:
// every node flushed is there with at least its calls (the 100 steps of
// the first phase, then 250), every wall stack with at least its samples.
func TestCalltreeFlushReports(t *testing.T) {
	root := agentOnly(t)
	dir := t.TempDir()
	flushDemo(t, dir)
	c := exec.Command("java", "-agentpath:"+filepath.Join(root, "bin", "libjprof.so")+"=calltree,wall=20,include=FlushDemo*,dir="+dir,
		"-cp", dir, "FlushDemo")
	c.Dir = dir
	stdin, err := c.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	c.Stderr = &stderr
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Process.Kill() })
	rd := bufio.NewReader(stdout)
	if line, err := rd.ReadString('\n'); err != nil || line != "phase 1 done\n" {
		t.Fatalf("FlushDemo: %q %v\n%s", line, err, stderr.String())
	}
	p := strconv.Itoa(c.Process.Pid)
	// Flush until the wall sampler's first round is in (a round every
	// 20 ms from the JVM's start; the program may pause before it): each
	// flush writes the whole run so far again.
	flushes := 0
	testenv.WaitFor(t, "a flushed wall profile with a sample", func() bool {
		out, err := exec.Command(filepath.Join(root, "bin", "rtdriver"), "-d", dir, "-p", p, "flush").CombinedOutput()
		if err != nil {
			t.Fatalf("rtdriver flush: %v\n%s\n%s", err, out, stderr.String())
		}
		flushes++
		st, err := os.Stat(filepath.Join(dir, "jprof-"+p+"-wall.folded"))
		return err == nil && st.Size() > 0
	})
	t.Logf("%d flushes", flushes)
	files := []string{"log-rt", "log-gen", "callflow.pb.gz", "callflow.folded", "jprof-" + p + ".pb.gz", "jprof-" + p + "-wall.folded"}
	flushed := map[string][]byte{}
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil || len(b) == 0 {
			t.Errorf("after rtdriver flush, %s: %v (%d bytes)\n%s", f, err, len(b), stderr.String())
		}
		flushed[f] = b
	}
	flushedWall := readFolded(t, filepath.Join(dir, "jprof-"+p+"-wall.folded"))
	if _, err := io.WriteString(stdin, "go on\n"); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(rd)
	if err := c.Wait(); err != nil || !strings.Contains(string(rest), "FlushDemo done 500") {
		t.Fatalf("FlushDemo: %v %q\n%s", err, rest, stderr.String())
	}
	t.Logf("the JVM's stderr:\n%s", stderr.String())

	before, after := logNodes(string(flushed["log-rt"])), logNodes(readText(t, filepath.Join(dir, "log-rt")))
	steps := func(nodes map[string]int64) (n int64) {
		for k, v := range nodes {
			if strings.HasSuffix(k, ";FlushDemo.phase;FlushDemo.step") {
				n += v
			}
		}
		return n
	}
	if steps(before) != 100 || steps(after) != 250 {
		t.Errorf("FlushDemo.step: %d calls in the flushed log-rt, %d at the end; want 100 and 250\nflushed:\n%s", steps(before), steps(after), flushed["log-rt"])
	}
	for k, v := range before {
		if after[k] < v {
			t.Errorf("log-rt node %s: %d calls flushed, %d at the end", k, v, after[k])
		}
	}
	if string(flushed["log-gen"]) == readText(t, filepath.Join(dir, "log-gen")) {
		t.Errorf("log-gen at the end is the flushed one: not written again")
	}
	final := readFolded(t, filepath.Join(dir, "jprof-"+p+"-wall.folded"))
	for k, v := range flushedWall {
		if final[k] < v {
			t.Errorf("wall stack %s: %d ns flushed, %d at the end", k, v, final[k])
		}
	}
}

func readText(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
