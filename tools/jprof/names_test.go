package jprof_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"perfinsp/format/nrm2"
	"perfinsp/format/trace"
)

// The sig option names methods as PI shows them (the JVM's class name and
// the method's signature: JProfDemo.fib(I)I), in calltree's names (log-rt)
// as in the trace's JIT records; include= still takes a dotted class
// pattern. Without it the names are the short ones. Call counts as in
// TestCalltreeDemo.
func TestCalltreeSigNames(t *testing.T) {
	root := agentOnly(t)
	for _, sig := range []bool{true, false} {
		dir := t.TempDir()
		opts := "calltree,include=JProfDemo*,dir=" + dir
		if sig {
			opts += ",sig"
		}
		if out, err := java(root, dir, opts, "JProfDemo").CombinedOutput(); err != nil || !strings.Contains(string(out), "JProfDemo done") {
			t.Fatalf("java (%s): %v\n%s", opts, err, out)
		}
		threads, text := report(t, root, dir, "--cal", "minima")
		calls := map[string]int64{}
		for _, rows := range threads {
			for _, r := range rows {
				calls[r.name] += r.calls
			}
		}
		want := map[string]int64{"JProfDemo.main([Ljava/lang/String;)V": 1, "JProfDemo.fib(I)I": 465, "JProfDemo.empty()V": 1000,
			"JProfDemo.catcher()I": 3, "JProfDemo.thrower(I)V": 6, "JProfDemo.nativeAdd(II)I": 7, "JProfDemo.hot(J)J": 30000, "JProfDemo.work(I)J": 5}
		for n, w := range want {
			if !sig {
				n = n[:strings.Index(n, "(")]
			}
			if calls[n] != w {
				t.Errorf("sig %v: %s: %d calls, want %d\n%s", sig, n, calls[n], w, text)
			}
		}
		for n := range calls {
			if !strings.HasPrefix(n, "JProfDemo") && !strings.Contains(n, "Lambda") {
				t.Errorf("sig %v: %q recorded: include=JProfDemo* let another class in", sig, n)
			}
			if strings.Contains(n, "(") != sig {
				t.Errorf("sig %v: name %q", sig, n)
			}
		}
	}
}

// piName is a method name as PI shows it: pkg/Class.method(args)ret.
var piName = regexp.MustCompile(`^[A-Za-z_$][\w$/]*\.[\w$<>]+\([^)]*\)\S+$`)

// With sig, the trace's records carry the same names (daemon backend here;
// the module path takes the agent's strings as they are, scripts/vmtest/
// methodprog.c): JIT_METHOD names of calltree,trace and JIT_LOAD names of
// compiled methods have their signatures, and post --merge shows them.
func TestTraceSigNames(t *testing.T) {
	root := build(t)
	dir := t.TempDir()
	out, sw, err := tracedJavaRun(t, root, dir, "calltree,trace,sig,verbose,include=HotLoop*", "1")
	if err != nil || !strings.Contains(string(out), "records written to the trace, 0 not") {
		t.Fatalf("java: %v\n%s", err, out)
	}
	sw("get", "s.nrm2")
	f, err := nrm2.Open(filepath.Join(dir, "s.nrm2"))
	if err != nil {
		t.Fatal(err)
	}
	methods := map[string]bool{}
	var sigLoads []string
	_ = f.Records(func(r *trace.Record) error {
		if r.Major == trace.MajorJITLoad && r.Minor == trace.JITMethod {
			methods[r.Str] = true
		}
		if r.Major == trace.MajorJITLoad && r.Minor == trace.JITLoad && piName.MatchString(r.Str) {
			sigLoads = append(sigLoads, r.Str)
		}
		return nil
	})
	f.Close()
	for _, n := range []string{"HotLoop.main([Ljava/lang/String;)V", "HotLoop.spin(J)J"} {
		if !methods[n] {
			t.Errorf("no JIT_METHOD record named %q; the trace's: %v", n, methods)
		}
	}
	if len(sigLoads) == 0 {
		t.Errorf("no JIT_LOAD name of a compiled method with its signature")
	} else {
		t.Logf("%d JIT_LOAD names with signatures, e.g. %q", len(sigLoads), sigLoads[0])
	}
	post := exec.Command(filepath.Join(root, "bin", "post"), "-r", filepath.Join(dir, "s.nrm2"), "-o", dir, "--merge")
	if o, err := post.CombinedOutput(); err != nil {
		t.Fatalf("post: %v\n%s", err, o)
	}
	text, err := os.ReadFile(filepath.Join(dir, "merge.out"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(text), "- - HotLoop.spin(J)J\n") {
		t.Errorf("merge.out has no HotLoop.spin(J)J node below main:\n%.3000s", text)
	}
}

// longSigProgram writes and compiles LongSig.java in dir: two overloads
// m(String x30, int) and m(String x30, long), names with their signatures
// of 553 bytes that differ only at the end; m(..., int) is called 3 times,
// m(..., long) 5 times. It returns the two sig names.
func longSigProgram(t *testing.T, dir string) (nameI, nameJ string) {
	t.Helper()
	var params, args []string
	for i := 0; i < 30; i++ {
		params = append(params, fmt.Sprintf("String a%d", i))
		args = append(args, "null")
	}
	p, a := strings.Join(params, ", "), strings.Join(args, ", ")
	src := "public class LongSig {\n static long n;\n" +
		" static void m(" + p + ", int x) { n += x; }\n" +
		" static void m(" + p + ", long x) { n += 2 * x; }\n" +
		" public static void main(String[] args) {\n" +
		"  for (int i = 0; i < 3; i++) m(" + a + ", 1);\n" +
		"  for (int i = 0; i < 5; i++) m(" + a + ", 1L);\n" +
		"  System.out.println(\"LongSig done \" + n);\n }\n}\n"
	if err := os.WriteFile(filepath.Join(dir, "LongSig.java"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	c := exec.Command("javac", "-d", dir, filepath.Join(dir, "LongSig.java"))
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("javac: %v\n%s", err, out)
	}
	sig := "LongSig.m(" + strings.Repeat("Ljava/lang/String;", 30)
	return sig + "I)V", sig + "J)V"
}

// Names are never cut so that two become one: two overloads whose
// signatures run past 511 bytes are two methods in log-rt, each with its
// whole name and its own calls; in the trace (whose records hold 480
// bytes of a name) each is its beginning and a hash of the whole name,
// two names still.
func TestLongSignaturesApart(t *testing.T) {
	root := build(t)
	cp := t.TempDir()
	nameI, nameJ := longSigProgram(t, cp)
	dir := t.TempDir()
	c := exec.Command("java", "-agentpath:"+filepath.Join(root, "bin", "libjprof.so")+"=calltree,sig,include=LongSig*,dir="+dir,
		"-cp", cp, "LongSig")
	c.Dir = dir
	if out, err := c.CombinedOutput(); err != nil || !strings.Contains(string(out), "LongSig done 13") {
		t.Fatalf("java: %v\n%s", err, out)
	}
	threads, text := readLogRT(t, dir)
	calls := map[string]int64{}
	for _, rows := range threads {
		for _, r := range rows {
			calls[r.name] += r.calls
		}
	}
	if calls[nameI] != 3 || calls[nameJ] != 5 {
		t.Errorf("log-rt: %d calls of m(...I)V, %d of m(...J)V, want 3 and 5 under their whole names; names: %q\n%.3000s",
			calls[nameI], calls[nameJ], mapKeys(calls), text)
	}

	tdir := t.TempDir()
	out, sw, err := tracedJavaRunCP(t, root, tdir, "calltree,trace,sig,verbose,include=LongSig*", cp, "LongSig")
	if err != nil || !strings.Contains(string(out), "records written to the trace, 0 not") {
		t.Fatalf("java: %v\n%s", err, out)
	}
	sw("get", "s.nrm2")
	f, err := nrm2.Open(filepath.Join(tdir, "s.nrm2"))
	if err != nil {
		t.Fatal(err)
	}
	var ms []string
	_ = f.Records(func(r *trace.Record) error {
		if r.Major == trace.MajorJITLoad && r.Minor == trace.JITMethod && strings.HasPrefix(r.Str, "LongSig.m(") {
			ms = append(ms, r.Str)
		}
		return nil
	})
	f.Close()
	hashed := regexp.MustCompile(`^(LongSig\.m\(.*)#[0-9a-f]{16}$`)
	if len(ms) != 2 || ms[0] == ms[1] {
		t.Fatalf("the trace's JIT_METHOD names of m: %q, want two different", ms)
	}
	for _, n := range ms {
		m := hashed.FindStringSubmatch(n)
		if len(n) > 480 || m == nil || !strings.HasPrefix(nameI, m[1]) {
			t.Errorf("trace name %q (%d bytes): want at most 480, the whole name's beginning, # and 16 hex digits", n, len(n))
		}
	}
}

func mapKeys(m map[string]int64) []string {
	var k []string
	for n := range m {
		k = append(k, n)
	}
	return k
}
