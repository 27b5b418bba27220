package jprof_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"perfinsp/format/nrm2"
	"perfinsp/format/trace"
)

// javacSources writes n classes (generics, lambdas, string switches, calls
// between them) and the bundled examples' sources into dir/src and returns
// the files, for javac runs.
func javacSources(t *testing.T, root, dir string, n int) []string {
	t.Helper()
	src := filepath.Join(dir, "src", "gen")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	var files []string
	for i := 0; i < n; i++ {
		body := fmt.Sprintf(`package gen;
import java.util.*;
import java.util.function.*;
public class C%[1]d implements Comparable<C%[1]d> {
    private final int id;
    private final Map<String, List<Integer>> index = new HashMap<>();
    public C%[1]d(int id) { this.id = id; }
    public int compareTo(C%[1]d o) { return Integer.compare(id, o.id); }
    static int helper(int n) { return n * 31 + %[1]d + C%[2]d.twice(n); }
    static int twice(int n) { return 2 * n; }
    public String kind(String s) {
        switch (s) {
        case "alpha": return "a" + id;
        case "beta": return "b" + id;
        default: return s.toUpperCase(Locale.ROOT);
        }
    }
    public List<String> names(List<? extends CharSequence> in) {
        List<String> out = new ArrayList<>();
        for (CharSequence c : in) out.add(c.toString().trim());
        out.sort(Comparator.comparing(String::length).thenComparing(Function.identity()));
        return out;
    }
    public Optional<Integer> first(String key) {
        return Optional.ofNullable(index.get(key)).flatMap(l -> l.stream().filter(x -> x > id).findFirst());
    }
}
`, i, (i+1)%n)
		p := filepath.Join(src, fmt.Sprintf("C%d.java", i))
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, p)
	}
	ex, _ := filepath.Glob(filepath.Join(root, "examples", "java", "*.java"))
	if len(ex) == 0 {
		t.Fatal("no examples/java sources")
	}
	return append(files, ex...)
}

// traceOn starts tracing (tprof at 1000 Hz and the method-event majors) in
// a private daemon with trace buffers of size per CPU in normal mode, and
// returns the environment and the swtrace runner (which returns the
// output and the exit error).
func traceOn(t *testing.T, root, dir, size string) ([]string, func(args ...string) (string, error)) {
	t.Helper()
	env := daemonEnv(t, root, dir)
	sw := func(args ...string) (string, error) {
		c := exec.Command(filepath.Join(root, "bin", "swtrace"), args...)
		c.Env, c.Dir = env, dir
		out, err := c.CombinedOutput()
		return string(out), err
	}
	for _, a := range [][]string{{"free"}, {"mode", "normal"}, {"init", "-t", size, "-m", "2M"},
		{"enable", "--only", "tprof", "0x30", "0x50"}, {"setrate", "1000"}, {"on", "--discard"}} {
		if out, err := sw(a...); err != nil {
			t.Fatalf("swtrace %v: %v\n%s", a, err, out)
		}
	}
	return env, sw
}

// calls counts the method entries of the trace per method name (the
// JIT_METHOD records of pid name the ids).
func traceCalls(t *testing.T, path string, pid int) map[string]int64 {
	t.Helper()
	f, err := nrm2.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	names := map[uint64]string{}
	byID := map[uint64]int64{}
	err = f.Records(func(r *trace.Record) error {
		switch {
		case r.Major == trace.MajorJITLoad && r.Minor == trace.JITMethod && int(r.Field(0)) == pid:
			names[r.Field(1)] = r.Str
		case (r.Major == trace.MajorInterp || r.Major == trace.MajorJitted) && r.Minor == 0x10 && int(r.Field(0)) == pid:
			byID[r.Field(2)|r.Field(3)<<32]++
		}
		return nil
	})
	if err != nil {
		t.Fatalf("reading the trace: %v", err)
	}
	out := map[string]int64{}
	for id, n := range byID {
		name, ok := names[id]
		if !ok {
			t.Errorf("method id %#x has %d entries and no JIT_METHOD record", id, n)
		}
		out[name] += n
	}
	return out
}

// javac compiling real sources under calltree,trace through pitraced (its
// main and parser packages: all of javac is some 50 million calls): every
// method entry the call-flow runtime counted (log-rt) is in the trace, under
// its name, as many times — the agent's binary records lose, duplicate and
// misname nothing — and swtrace off succeeds.
func TestTraceJavacExact(t *testing.T) {
	root := build(t)
	if _, err := os.Stat(filepath.Join(root, "bin", "hookit")); err != nil {
		agentOnly(t)
	}
	dir := t.TempDir()
	files := javacSources(t, root, dir, 10)
	env, sw := traceOn(t, root, dir, "32M")
	ct := filepath.Join(dir, "ct")
	if err := os.Mkdir(ct, 0o755); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"-agentpath:" + filepath.Join(root, "bin", "libjprof.so") + "=calltree,trace,verbose,include=com.sun.tools.javac.main.*,include=com.sun.tools.javac.parser.*,dir=" + ct,
		"-m", "jdk.compiler/com.sun.tools.javac.Main", "-d", filepath.Join(dir, "classes")}, files...)
	c := exec.Command("java", args...)
	c.Env, c.Dir = env, dir
	out, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("javac under the agent: %v\n%s", err, out)
	}
	if o, err := sw("off"); err != nil {
		t.Fatalf("swtrace off: %v\n%s", err, o)
	}
	m := regexp.MustCompile(`(\d+) records written to the trace, 0 not`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("the agent's summary:\n%s", out)
	}
	t.Logf("%s", strings.TrimSpace(string(out)))
	if o, err := sw("get", "t.nrm2"); err != nil {
		t.Fatalf("swtrace get: %v\n%s", err, o)
	}
	pid := 0
	ents, _ := os.ReadDir(ct)
	for _, e := range ents {
		if mm := regexp.MustCompile(`^hookit-(\d+)\.names$`).FindStringSubmatch(e.Name()); mm != nil {
			pid, _ = strconv.Atoi(mm[1])
		}
	}
	if pid == 0 {
		t.Fatalf("no names file in %s", ct)
	}
	inTrace := traceCalls(t, filepath.Join(dir, "t.nrm2"), pid)
	threads, _ := report(t, root, ct, "--cal", "none")
	inLog := map[string]int64{}
	for _, rows := range threads {
		for _, r := range rows {
			if r.lv > 0 {
				inLog[r.name] += r.calls
			}
		}
	}
	var total int64
	for name, n := range inLog {
		total += n
		if inTrace[name] != n {
			t.Errorf("%s: %d calls in log-rt, %d entries in the trace", name, n, inTrace[name])
		}
	}
	for name, n := range inTrace {
		if _, ok := inLog[name]; !ok {
			t.Errorf("%s: %d entries in the trace, none in log-rt", name, n)
		}
	}
	if total < 20000 || inLog["com.sun.tools.javac.main.JavaCompiler.compile"] != 1 {
		t.Errorf("javac's run: %d calls, JavaCompiler.compile %d times: want a whole compilation", total, inLog["com.sun.tools.javac.main.JavaCompiler.compile"])
	}
	t.Logf("%d methods, %d calls: the same in log-rt and in the trace", len(inLog), total)
}

// A normal-mode buffer too small for the run: tracing stops when it fills;
// the JVM runs on and ends normally, the agent says how many records were
// lost and what to do, and swtrace off succeeds, naming the full buffer and
// counting the lost records.
func TestTraceBufferFull(t *testing.T) {
	root := build(t)
	dir := t.TempDir()
	env, sw := traceOn(t, root, dir, "64K")
	c := java(root, dir, "calltree,trace,dir="+dir, "JProfDemo")
	c.Env = env
	out, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("JProfDemo under the agent: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "JProfDemo done") {
		t.Errorf("JProfDemo did not finish:\n%s", out)
	}
	m := regexp.MustCompile(`jprof: (\d+) records lost: tracing was not on`).FindSubmatch(out)
	if m == nil || string(m[1]) == "0" || !strings.Contains(string(out), "swtrace init -t") {
		t.Errorf("the agent does not say the records it lost and what to do:\n%s", out)
	}
	off, err := sw("off")
	if err != nil {
		t.Fatalf("swtrace off after the buffer filled: %v\n%s", err, off)
	}
	lost := regexp.MustCompile(`a buffer filled.*: \d+ records, (\d+) lost`).FindStringSubmatch(off)
	if lost == nil || lost[1] == "0" {
		t.Errorf("swtrace off does not name the full buffer and the lost records:\n%s", off)
	}
	t.Logf("agent: %s\nswtrace off: %s", strings.TrimSpace(string(m[0])), strings.TrimSpace(off))
}
