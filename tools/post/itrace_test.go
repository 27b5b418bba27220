package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"perfinsp/analysis/itrace"
	"perfinsp/internal/testenv"
)

func needTool(t *testing.T, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		testenv.Missing(t, "%s is not installed (scripts/deps/itrace.txt)", name)
	}
}

func parseCG(t *testing.T, path string) map[string]*itrace.CGFunc {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := itrace.ParseCallgrind(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return m
}

// TestRunITraceMatchesCallgrind runs scripts/run.itrace on the bundled
// example (a PIE, as built by default) through pitraced, swtrace and post,
// and checks `post --callgrind` against `valgrind --tool=callgrind` on
// the same binary: every function of the program's own has the same
// exclusive instructions and the same calls, exactly.
func TestRunITraceMatchesCallgrind(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipped: run.itrace with the daemon backend needs root")
	}
	needTool(t, "gcc")
	needTool(t, "valgrind")
	root, _ := filepath.Abs("../..")
	build := exec.Command("go", "build", "-o", filepath.Join(root, "bin")+"/", "./tools/swtrace", "./tools/post", "./daemon/cmd/pitraced")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	dir := t.TempDir()
	prog := filepath.Join(dir, "itrace")
	// The flags of mk/itrace.mk.
	if out, err := exec.Command("gcc", "-O1", "-g", "-fno-inline", "-fno-optimize-sibling-calls", "-Wall", "-Werror", "-pthread",
		"-o", prog, filepath.Join(root, "examples", "itrace.c"), "-lm").CombinedOutput(); err != nil {
		t.Fatalf("build example: %v\n%s", err, out)
	}
	const n = "5000"
	cgOut := filepath.Join(dir, "valgrind.out")
	if out, err := exec.Command("valgrind", "--tool=callgrind", "--callgrind-out-file="+cgOut, prog, n).CombinedOutput(); err != nil {
		t.Fatalf("valgrind: %v\n%s", err, out)
	}
	env := append(os.Environ(), "PERFINSP_SOCKET="+filepath.Join(dir, "pitraced.sock"), "PERFINSP_BACKEND=daemon")
	defer func() {
		c := exec.Command(filepath.Join(root, "bin", "swtrace"), "free")
		c.Env = env
		c.Run()
		exec.Command("pkill", "-f", "pitraced --socket "+filepath.Join(dir, "pitraced.sock")).Run()
	}()
	// --step verify: single-stepped, and the block decoder checked at
	// every taken branch (the flag's way through swtrace and pitraced)
	run := exec.Command(filepath.Join(root, "scripts", "run.itrace"), "--step", "verify", "-o", dir, "--", prog, n)
	run.Env, run.Dir = env, dir
	out, err := run.CombinedOutput()
	if err != nil {
		t.Fatalf("run.itrace: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "itrace example: n=5000 signals=1") || !strings.Contains(string(out), "leaf_loop") {
		t.Fatalf("run.itrace output:\n%s", out)
	}
	stepping := regexp.MustCompile(`run\.itrace: stepping: single-stepped \(--step verify\).*block decoder: ([0-9]+) blocks checked, ([0-9]+) disagreements`).FindStringSubmatch(string(out))
	if stepping == nil {
		t.Fatalf("run.itrace --step verify printed no stepping line with the decoder's check:\n%s", out)
	}
	if checked, _ := strconv.Atoi(stepping[1]); checked < 20000 || stepping[2] != "0" {
		t.Errorf("block decoder over the example: %s blocks checked (want > 20,000: 5,000 leaf calls), %s disagreements (want 0)", stepping[1], stepping[2])
	} else {
		t.Logf("block decoder: %s blocks checked, 0 disagreements", stepping[1])
	}
	want := parseCG(t, cgOut)
	got := parseCG(t, filepath.Join(dir, "callgrind.out"))
	for _, name := range []string{"main", "fib", "leaf", "leaf_loop", "apply", "op_add", "op_mul", "copy_rep", "on_signal", "worker", "use_libm"} {
		w, g := want[name], got[name]
		if w == nil || g == nil {
			t.Errorf("%s: callgrind %v, post --callgrind %v", name, w, g)
			continue
		}
		if w.Self != g.Self || w.Calls != g.Calls {
			t.Errorf("%-10s post: %d instructions, %d calls; callgrind: %d, %d", name, g.Self, g.Calls, w.Self, w.Calls)
		} else {
			t.Logf("%-10s %7d instructions %5d calls, as callgrind", name, g.Self, g.Calls)
		}
	}
	checkCallgrindPositions(t, filepath.Join(dir, "callgrind.out"), prog)
	checkCallgrindLines(t, filepath.Join(dir, "callgrind.out"), cgOut)
	checkITraceAnnotate(t, dir, want)
	checkITracePprof(t, dir, prog, want)
	// The arc report: a line per taken branch, the example's calls among them.
	f, err := os.Open(filepath.Join(dir, "arc"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	calls, sig := 0, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		if strings.Contains(l, " CALL ") && strings.Contains(l, "apply:itrace") {
			calls++
		}
		if strings.Contains(l, "SIGNAL_10") {
			sig = true
		}
	}
	if calls != 102 || !sig {
		t.Errorf("arc: %d CALL lines from apply (want 102: each calls op_add or op_mul once), SIGUSR1 line %v", calls, sig)
	}
	rep, err := os.ReadFile(filepath.Join(dir, "itrace.out"))
	// The trace starts at the program's first instruction: the dynamic
	// loader's entry (_dl_start, before main), which callgrind also runs
	// but under valgrind's own preloads, so its counts are not compared.
	if err != nil || !strings.Contains(string(rep), "fib:itrace") || !strings.Contains(string(rep), "callee") ||
		!strings.Contains(string(rep), "_dl_start:ld-linux") {
		t.Errorf("itrace.out: %v\n%.2000s", err, rep)
	}
	// -p PID -s SECONDS: attach to a running process for a while; it goes on after.
	burn := filepath.Join(dir, "cpuburn")
	if out, err := exec.Command("gcc", "-O2", "-g", "-pthread", "-o", burn, filepath.Join(root, "examples", "cpuburn.c")).CombinedOutput(); err != nil {
		t.Fatalf("build cpuburn: %v\n%s", err, out)
	}
	bc := exec.Command(burn, "100000")
	if err := bc.Start(); err != nil {
		t.Fatal(err)
	}
	defer bc.Process.Kill()
	d2 := filepath.Join(dir, "attach")
	att := exec.Command(filepath.Join(root, "scripts", "run.itrace"), "-o", d2, "-p", strconv.Itoa(bc.Process.Pid), "-s", "1")
	att.Env, att.Dir = env, dir
	if out, err := att.CombinedOutput(); err != nil || !strings.Contains(string(out), "tracing process") {
		t.Fatalf("run.itrace -p: %v\n%s", err, out)
	}
	rep, err = os.ReadFile(filepath.Join(d2, "itrace.out"))
	if err != nil || !regexp.MustCompile(`(heavy|medium|light):cpuburn`).Match(rep) {
		t.Fatalf("run.itrace -p: itrace.out has none of cpuburn's functions: %v\n%.1500s", err, rep)
	}
	if err := bc.Process.Signal(os.Interrupt); err != nil {
		t.Fatalf("cpuburn did not survive the trace: %v", err)
	}
}

// checkCallgrindPositions: post's callgrind file of the example names the
// traced command, has instruction positions, and every instruction
// position of the example's own functions (and every call site) lies in
// that function in the ELF file (what objdump, and so KCachegrind's
// machine-code view, shows); callgrind_annotate --auto=yes reads it and
// annotates the example's source with the instructions.
func checkCallgrindPositions(t *testing.T, path, prog string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	if !strings.Contains(text, "\ncmd: itrace\n") || !strings.Contains(text, "\npositions: instr line\n") {
		t.Fatalf("callgrind header: no cmd: itrace or positions: instr line:\n%.400s", text)
	}
	ef, syms := testenv.ELF(t, prog)
	var plt [][2]uint64 // PLT stubs: their instructions count to the caller, as callgrind's
	for _, sec := range ef.Sections {
		if strings.HasPrefix(sec.Name, ".plt") {
			plt = append(plt, [2]uint64{sec.Addr, sec.Addr + sec.Size})
		}
	}
	ranges := map[string][2]uint64{}
	for _, s := range syms {
		if s.Size > 0 {
			ranges[s.Name] = [2]uint64{s.Value, s.Value + s.Size}
		}
	}
	names := map[string]string{}
	name := func(v string) string { // callgrind's compressed names
		if i := strings.IndexByte(v, ')'); strings.HasPrefix(v, "(") && i > 0 {
			if rest := strings.TrimSpace(v[i+1:]); rest != "" {
				names[v[:i+1]] = rest
				return rest
			}
			return names[v[:i+1]]
		}
		return v
	}
	obNames, fnNames := map[string]string{}, map[string]string{}
	var ob, fn string
	checked, inFn := 0, 0
	for _, l := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(l, "ob="):
			names = obNames
			ob = name(l[3:])
		case strings.HasPrefix(l, "fn="):
			names = fnNames
			fn = name(l[3:])
		case strings.HasPrefix(l, "cfn="):
			names = fnNames
			name(l[4:])
		case strings.HasPrefix(l, "0x") && ob == prog:
			f := strings.Fields(l)
			addr, err := strconv.ParseUint(f[0], 0, 64)
			if err != nil || len(f) != 3 {
				t.Fatalf("cost line %q", l)
			}
			r, ok := ranges[fn]
			if !ok {
				continue
			}
			checked++
			inPLT := false
			for _, p := range plt {
				inPLT = inPLT || addr >= p[0] && addr < p[1]
			}
			if addr >= r[0] && addr < r[1] {
				inFn++
			} else if !inPLT {
				t.Errorf("%s: position %#x outside the function (%#x-%#x) and the PLT", fn, addr, r[0], r[1])
			}
		}
	}
	if checked < 20 || inFn < checked*3/4 {
		t.Fatalf("%d instruction positions in the example's functions, %d of them in their function", checked, inFn)
	}
	ann, err := exec.Command("callgrind_annotate", "--auto=yes", path).CombinedOutput()
	if err != nil {
		t.Fatalf("callgrind_annotate --auto=yes: %v\n%s", err, ann)
	}
	if !regexp.MustCompile(`(?m)^\s*[0-9,]+ \([ 0-9.]+%\)\s+\S*itrace\.c:leaf_loop`).Match(ann) ||
		!regexp.MustCompile(`(?m)^\s*[0-9,]+ \([ 0-9.]+%\)\s+s \+= leaf\(i\);`).Match(ann) {
		t.Fatalf("callgrind_annotate --auto=yes does not show leaf_loop and its annotated loop:\n%s", ann)
	}
	t.Logf("callgrind: %d instruction positions in the example's functions, %d in them, the others in PLT stubs", checked, inFn)
}

// checkITraceAnnotate: post --annotate FUNC on the ITrace of the example
// gives every instruction of FUNC its exact count: their sum is
// callgrind's count of the function (fib, leaf_loop, copy_rep with its
// rep movsb's iterations), every instruction of leaf (straight-line code)
// ran once per call, and the source line of leaf_loop's call has its
// count.
func checkITraceAnnotate(t *testing.T, dir string, want map[string]*itrace.CGFunc) {
	t.Helper()
	nrm := filepath.Join(dir, "swtrace.nrm2")
	for _, fn := range []string{"leaf", "leaf_loop", "fib", "copy_rep"} {
		out := filepath.Join(dir, "annotate-"+fn)
		if _, errs, code := runPost(t, out, "-r", nrm, "--annotate", fn); code != 0 {
			t.Fatalf("post --annotate %s: %s", fn, errs)
		}
		b, err := os.ReadFile(filepath.Join(out, "annotate.out"))
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		var sum uint64
		var counts []uint64
		for _, m := range regexp.MustCompile(`(?m)^\s*[0-9.]+ :\s+(\d+)\s+[0-9a-f]+:  \S`).FindAllStringSubmatch(text, -1) {
			n, _ := strconv.ParseUint(m[1], 10, 64)
			sum += n
			counts = append(counts, n)
		}
		w := want[fn]
		if w == nil || sum != w.Self {
			t.Errorf("annotate %s: %d instructions at its instructions, callgrind %v:\n%s", fn, sum, w, text)
			continue
		}
		switch fn {
		case "leaf":
			for _, n := range counts {
				if n != w.Calls {
					t.Errorf("annotate leaf: an instruction counted %d times, leaf was called %d times:\n%s", n, w.Calls, text)
					break
				}
			}
		case "leaf_loop":
			if !regexp.MustCompile(`itrace\.c:67  s \+= leaf\(i\);   \[line: [1-9][0-9]*, `).MatchString(text) {
				t.Errorf("annotate leaf_loop: no count on the line of its call:\n%s", text)
			}
		}
		t.Logf("annotate %-9s %7d instructions at %d instructions (= callgrind)", fn, sum, len(counts))
	}
}

// checkITracePprof: post --itrace-pprof of the example carries the
// example's mapping with its build id, each leaf instruction and call
// site at its address in the file with its DWARF line, so that pprof
// itself shows leaf_loop's flat instructions as callgrind's self count,
// its call line with the instructions run there and in leaf, and its
// call instruction run once per call of leaf; and the profile's flat
// and cum are itrace.out's exclusive and inclusive instructions.
func checkITracePprof(t *testing.T, dir, prog string, want map[string]*itrace.CGFunc) {
	t.Helper()
	out := filepath.Join(dir, "pprof")
	prof := filepath.Join(out, "itrace.pb.gz")
	if _, errs, code := runPost(t, out, "-r", filepath.Join(dir, "swtrace.nrm2"), "--itrace-pprof", prof); code != 0 {
		t.Fatalf("post --itrace-pprof: %s", errs)
	}
	p := readProfile(t, prof)
	buildID := testenv.BuildID(t, prog)
	lo, hi := testenv.FuncRange(t, prog, "leaf_loop")
	var flat int64
	for _, s := range p.Sample {
		for i, l := range s.Location {
			if l.Mapping != nil && (l.Address < l.Mapping.Start || l.Address >= l.Mapping.Limit) {
				t.Fatalf("location %#x outside its mapping %#x-%#x of %s", l.Address, l.Mapping.Start, l.Mapping.Limit, l.Mapping.File)
			}
			if i > 0 || l.Line[0].Function.Name != "leaf_loop" {
				continue
			}
			flat += s.Value[0]
			if m := l.Mapping; m == nil || m.File != prog || m.BuildID != buildID || l.Address < lo || l.Address >= hi || l.Line[0].Line == 0 {
				t.Fatalf("a leaf_loop instruction at %#x (leaf_loop: %#x-%#x), line %d, mapping %+v (want %s, build id %s)", l.Address, lo, hi, l.Line[0].Line, m, prog, buildID)
			}
		}
	}
	leafLoop, leaf := want["leaf_loop"], want["leaf"]
	if flat != int64(leafLoop.Self) {
		t.Errorf("the profile's leaf_loop samples: %d instructions, callgrind %d", flat, leafLoop.Self)
	}
	top := goPprof(t, "-top", "-nodefraction=0", prof)
	m := regexp.MustCompile(`(?m)^\s*(\d+)\s+\S+%\s+\S+%\s+\d+\s+\S+%\s+leaf_loop$`).FindStringSubmatch(top)
	if m == nil || m[1] != strconv.FormatUint(leafLoop.Self, 10) {
		t.Errorf("pprof -top: leaf_loop's flat %v, callgrind's self %d:\n%s", m, leafLoop.Self, top)
	}
	// line 67 runs leaf_loop's own instructions of the call and leaf's
	list := goPprof(t, "-list", "^leaf_loop$", prof)
	m = regexp.MustCompile(`(?m)^\s+(\d+)\s+(\d+)\s+67:\s+s \+= leaf\(i\);`).FindStringSubmatch(list)
	if m == nil {
		t.Fatalf("pprof -list leaf_loop does not show line 67 with its instructions:\n%s", list)
	}
	if f, c := atoi(m[1]), atoi(m[2]); f == 0 || c-f != leaf.Self {
		t.Errorf("pprof -list leaf_loop: line 67 %d flat, %d cum; want cum - flat = leaf's %d instructions:\n%s", f, c, leaf.Self, list)
	}
	disasm := goPprof(t, "-disasm", `\bleaf_loop\b`, prof)
	m = regexp.MustCompile(`(?m)^\s+(\d+)\s+(\d+)\s+[0-9a-f]+: CALL leaf\(SB\)`).FindStringSubmatch(disasm)
	if m == nil || atoi(m[1]) != leaf.Calls || atoi(m[2])-atoi(m[1]) != leaf.Self {
		t.Errorf("pprof -disasm leaf_loop: its call instruction %v, want run %d times (leaf's calls) with leaf's %d instructions:\n%s", m, leaf.Calls, leaf.Self, disasm)
	}
	t.Logf("pprof: leaf_loop %d instructions; line 67 and its call as callgrind\n%s", flat, list)
}

func atoi(s string) uint64 {
	n, _ := strconv.ParseUint(s, 10, 64)
	return n
}

// checkCallgrindLines: each instruction's count at its own position, so
// callgrind_annotate gives leaf_loop's loop lines the counts it gives them
// from valgrind's own run of the same program (their instructions split
// between the for line and the call's line as callgrind splits them).
func checkCallgrindLines(t *testing.T, ours, valgrinds string) {
	t.Helper()
	count := func(path, line string) string {
		ann, err := exec.Command("callgrind_annotate", "--auto=yes", path).CombinedOutput()
		if err != nil {
			t.Fatalf("callgrind_annotate --auto=yes %s: %v\n%s", path, err, ann)
		}
		m := regexp.MustCompile(`(?m)^\s*([0-9,]+) \([ 0-9.]+%\)\s+` + regexp.QuoteMeta(line) + `$`).FindSubmatch(ann)
		if m == nil {
			t.Fatalf("callgrind_annotate %s has no count on %q:\n%s", path, line, ann)
		}
		return string(m[1])
	}
	for _, line := range []string{"s += leaf(i);", "for (unsigned long i = 0; i < n; i++)"} {
		o, v := count(ours, line), count(valgrinds, line)
		if o != v {
			t.Errorf("callgrind_annotate, line %q: %s from post's file, %s from valgrind's", line, o, v)
		} else {
			t.Logf("callgrind_annotate, line %q: %s, as valgrind's", line, o)
		}
	}
}
