package itrace_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	itracerep "perfinsp/analysis/itrace"
	"perfinsp/format/nrm2"
	"perfinsp/format/trace"
	"perfinsp/internal/tracetest"
	"perfinsp/libperfutil/itrace"
)

// postCallgrind writes the trace and returns post --callgrind's functions.
func postCallgrind(t *testing.T, e *tracetest.Env, name string) map[string]*itracerep.CGFunc {
	t.Helper()
	e.Sw("off")
	e.Sw("get", name+".nrm2")
	cg := filepath.Join(e.Dir, name+".callgrind")
	post := exec.Command(filepath.Join(e.Bin, "post"), "-r", filepath.Join(e.Dir, name+".nrm2"), "--callgrind", cg, "-o", e.Dir)
	out, err := post.CombinedOutput()
	if err != nil {
		t.Fatalf("post: %v\n%s", err, out)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "itrace") {
			t.Logf("post: %s", l)
		}
	}
	f, err := os.Open(cg)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := itracerep.ParseCallgrind(f)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func calls(m map[string]*itracerep.CGFunc, name string) (uint64, uint64) {
	if f := m[name]; f != nil {
		return f.Calls, f.Self
	}
	return 0, 0
}

// TestCITraceOnOff: ITraceOn/ITraceOff around one call in a C program trace
// exactly that call (and what it calls); TraceHook writes its record.
func TestCITraceOnOff(t *testing.T) {
	e := tracetest.Setup(t, "./tools/post")
	prog := filepath.Join(e.Bin, "itrace_ctest")
	src := filepath.Join(tracetest.Root(), "libperfutil", "c")
	if out, err := exec.Command("gcc", "-O1", "-g", "-Wall", "-Wextra", "-Werror", "-I"+filepath.Join(src, "include"), "-o", prog,
		filepath.Join(src, "test", "itrace_test.c"), filepath.Join(src, "itrace.c"), filepath.Join(src, "agentconn.c")).CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	e.Sw("init", "-t", "16M")
	e.Sw("on")
	cmd := exec.Command(prog)
	cmd.Env = e.Environ
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "itrace C test done") {
		t.Fatalf("C test: %v\n%s", err, out)
	}
	m := postCallgrind(t, e, "c")
	if c, _ := calls(m, "itrace_target"); c != 1 {
		t.Errorf("itrace_target called %d times in the trace, want 1", c)
	}
	if c, self := calls(m, "itrace_leaf"); c != 7 || self == 0 || self%7 != 0 {
		t.Errorf("itrace_leaf: %d calls, %d instructions; want 7 calls (from itrace_target only), the same instructions each", c, self)
	}
	for _, f := range []string{"itrace_before", "itrace_after", "main"} {
		if _, self := calls(m, f); self > 0 && f != "main" {
			t.Errorf("%s ran untraced but has %d instructions in the trace", f, self)
		}
	}
	f, err := nrm2.Open(filepath.Join(e.Dir, "c.nrm2"))
	if err != nil {
		t.Fatal(err)
	}
	hooks := 0
	_ = f.Records(func(r *trace.Record) error {
		if r.Major == 0x1234 && r.Minor == 1 && r.Field(0) == 1 && r.Field(1) == 2 {
			hooks++
		}
		return nil
	})
	if hooks != 1 {
		t.Errorf("%d TraceHook records (0x1234/1: 1 2), want 1", hooks)
	}
}

//go:noinline
func goLeaf(i int) int { return i*3 + 1 }

//go:noinline
func goTarget() int {
	s := 0
	for i := 0; i < 5; i++ {
		s += goLeaf(i)
	}
	return s
}

// TestGoITraceOnOff: the Go API traces one call of goTarget and nothing
// before ITraceOn. The traced part runs in a child (this test binary again)
// with GODEBUG=asyncpreemptoff=1: single-stepped, a goroutine looks like
// it runs for ever, and the runtime's preemption signals would take most
// of the traced instructions (docs/itrace.md).
func TestGoITraceOnOff(t *testing.T) {
	if os.Getenv("ITRACE_GO_CHILD") == "1" {
		_ = goLeaf(100) // untraced
		if err := itrace.ITraceOn(); err != nil {
			t.Fatal(err)
		}
		_ = goTarget()
		st, err := itrace.ITraceOff()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("traced %d instructions in %d records", st.Instructions, st.Records)
		if _, err := itrace.ITraceOff(); err == nil {
			t.Fatal("a second ITraceOff succeeded")
		}
		return
	}
	e := tracetest.Setup(t, "./tools/post")
	// The MTE buffer holds every process's forks, execs and mappings
	// while the single-stepped child runs (minutes on a busy machine): 1M
	// per CPU fills beside a build and stops tracing, ending the session.
	e.Sw("init", "-t", "64M", "-m", "16M")
	e.Sw("enable", "--only", "itrace") // no tprof ticks in the buffer the session writes
	e.Sw("on")
	// go test runs test binaries without a symbol table; go test -c keeps it.
	bin := filepath.Join(e.Bin, "itrace.test")
	build := exec.Command("go", "test", "-c", "-o", bin, "./libperfutil/itrace")
	build.Dir = tracetest.Root()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go test -c: %v\n%s", err, out)
	}
	child := exec.Command(bin, "-test.run=^TestGoITraceOnOff$", "-test.v")
	child.Env = append(e.Environ, "ITRACE_GO_CHILD=1", "GODEBUG=asyncpreemptoff=1")
	out, err := child.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "PASS") {
		t.Fatalf("child: %v\n%s", err, out)
	}
	t.Logf("child: %s", out)
	m := postCallgrind(t, e, "go")
	var target, leaf *itracerep.CGFunc
	for name, f := range m {
		if strings.HasSuffix(name, ".goTarget") {
			target = f
		}
		if strings.HasSuffix(name, ".goLeaf") {
			leaf = f
		}
	}
	if target == nil || target.Calls != 1 || leaf == nil || leaf.Calls != 5 {
		var names []string
		for name := range m {
			if strings.Contains(name, "itrace") {
				names = append(names, name)
			}
		}
		t.Fatalf("goTarget %+v, goLeaf %+v: want 1 and 5 calls (the untraced goLeaf call not counted); %d functions, these name itrace: %v",
			target, leaf, len(m), names)
	}
}
