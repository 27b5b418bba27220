package jprof_test

import (
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
