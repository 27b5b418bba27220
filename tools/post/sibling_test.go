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

	"perfinsp/internal/tracetest"
)

// cgInclusive reads a callgrind file (valgrind's or post's) and returns per
// function (recursion suffixes merged) its inclusive Ir as
// callgrind_annotate --inclusive=yes sums it: its own cost and the cost of
// its calls to other functions.
func cgInclusive(t *testing.T, path string) map[string]uint64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	names := map[string]string{}
	resolve := func(v string) string {
		if strings.HasPrefix(v, "(") {
			if i := strings.IndexByte(v, ')'); i > 0 {
				if rest := strings.TrimSpace(v[i+1:]); rest != "" {
					names[v[:i+1]] = rest
				}
				v = names[v[:i+1]]
			}
		}
		return regexp.MustCompile(`'[0-9]+$`).ReplaceAllString(v, "")
	}
	out := map[string]uint64{}
	var cur, callee string
	callLine := false
	npos := 1 // positions before the cost on a cost line (positions: instr line: two)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if l == "" || l[0] == '#' {
			continue
		}
		if key, val, ok := strings.Cut(l, "="); ok && !strings.ContainsAny(key, " \t+-*") {
			switch key {
			case "fn":
				cur = resolve(val)
			case "cfn":
				callee = resolve(val)
			case "calls":
				callLine = true
			}
			continue
		}
		if v, ok := strings.CutPrefix(l, "positions:"); ok {
			npos = max(1, len(strings.Fields(v)))
			continue
		}
		fl := strings.Fields(l)
		if len(fl) < npos+1 || cur == "" || strings.Contains(fl[0], ":") {
			continue
		}
		v, err := strconv.ParseUint(fl[npos], 10, 64)
		if err != nil {
			t.Fatalf("%s: %q: %v", path, l, err)
		}
		if callLine {
			callLine = false
			if callee == cur {
				continue
			}
		}
		out[cur] += v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRunITraceSiblingCallsMatchCallgrind traces examples/sibling.c built
// at -O2 (sibling calls inside the program, a sibling call through the PLT
// into zlib, lazily bound calls of libz and libm) with run.itrace and
// checks post against valgrind --tool=callgrind on the same binary: per
// function the calls, exclusive and inclusive instructions, and the
// instruction-weighted stacks hold the tail-called functions where the
// code runs them.
func TestRunITraceSiblingCallsMatchCallgrind(t *testing.T) {
	needTool(t, "gcc")
	needTool(t, "valgrind")
	e := tracetest.Setup(t, "./tools/post")
	scripts := filepath.Join(e.Dir, "scripts")
	if err := os.MkdirAll(scripts, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"run.itrace", "runlib.sh"} {
		b, err := os.ReadFile(filepath.Join(tracetest.Root(), "scripts", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(scripts, f), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	prog := filepath.Join(e.Dir, "sibling")
	// -z lazy: the first call through each PLT entry goes through the
	// dynamic loader, which ends it with a jump to the bound function.
	if out, err := exec.Command("gcc", "-O2", "-g", "-Wall", "-Werror", "-Wl,-z,lazy", "-o", prog,
		filepath.Join(tracetest.Root(), "examples", "sibling.c"), "-lz", "-lm").CombinedOutput(); err != nil {
		t.Fatalf("build example (zlib1g-dev): %v\n%s", err, out)
	}
	if dis, err := exec.Command("objdump", "-d", prog).Output(); err == nil &&
		!regexp.MustCompile(`jmp +[0-9a-f]+ <sib_compress>`).Match(dis) {
		t.Fatalf("gcc -O2 built no sibling call of sib_compress: the test would not test them")
	}
	const n = "200"
	vg := filepath.Join(e.Dir, "valgrind.out")
	if out, err := exec.Command("valgrind", "--tool=callgrind", "--callgrind-out-file="+vg, prog, n).CombinedOutput(); err != nil {
		t.Fatalf("valgrind: %v\n%s", err, out)
	}
	outDir := filepath.Join(e.Dir, "out")
	run := exec.Command(filepath.Join(scripts, "run.itrace"), "-o", outDir, "--", prog, n)
	run.Env, run.Dir = e.Environ, e.Dir
	if out, err := run.CombinedOutput(); err != nil || !strings.Contains(string(out), "sibling: n=200") {
		t.Fatalf("run.itrace: %v\n%s", err, out)
	}
	want, got := parseCG(t, vg), parseCG(t, filepath.Join(outDir, "callgrind.out"))
	wantIncl, gotIncl := cgInclusive(t, vg), cgInclusive(t, filepath.Join(outDir, "callgrind.out"))
	// Inclusive counts of the functions whose calls go through the
	// dynamic loader's lazy binding are not compared: under valgrind the
	// loader resolves symbols with valgrind's preloaded libraries in scope.
	lazy := map[string]bool{"main": true, "sib_root": true, "crc32": true}
	for _, name := range []string{"main", "sib_mix", "sib_emit", "sib_compress", "sib_flush", "sib_a", "sib_b", "sib_c",
		"sib_crc", "sib_root", "crc32", "crc32_z", "cbrt"} {
		w, g := want[name], got[name]
		if w == nil || g == nil {
			t.Errorf("%s: callgrind %+v, post --callgrind %+v", name, w, g)
			continue
		}
		if w.Self != g.Self || w.Calls != g.Calls || (!lazy[name] && wantIncl[name] != gotIncl[name]) {
			t.Errorf("%-12s post: %d calls, %d exclusive, %d inclusive; callgrind: %d, %d, %d", name, g.Calls, g.Self, gotIncl[name], w.Calls, w.Self, wantIncl[name])
		} else if lazy[name] {
			t.Logf("%-12s %5d calls %7d exclusive, as callgrind (inclusive %d, callgrind's %d: the loader's lookups differ)", name, g.Calls, g.Self, gotIncl[name], wantIncl[name])
		} else {
			t.Logf("%-12s %5d calls %7d exclusive %7d inclusive, as callgrind", name, g.Calls, g.Self, gotIncl[name])
		}
	}
	// itrace.out: no function has fewer inclusive than exclusive
	// instructions.
	rep, err := os.ReadFile(filepath.Join(outDir, "itrace.out"))
	if err != nil {
		t.Fatal(err)
	}
	rows := regexp.MustCompile(`(?m)^ +([0-9]+) +([0-9]+) +([0-9]+)  (\S+)$`).FindAllStringSubmatch(string(rep), -1)
	if len(rows) < 20 {
		t.Fatalf("itrace.out: %d function rows\n%.2000s", len(rows), rep)
	}
	for _, r := range rows {
		ex, _ := strconv.ParseUint(r[2], 10, 64)
		in, _ := strconv.ParseUint(r[3], 10, 64)
		if in < ex {
			t.Errorf("itrace.out: %s: inclusive %d < exclusive %d", r[4], in, ex)
		}
	}
	// The stacks weighted by instructions: sib_emit runs below
	// sib_compress, which runs below sib_flush (its sibling caller).
	folded := filepath.Join(e.Dir, "folded")
	post := exec.Command(filepath.Join(e.Bin, "post"), "-r", filepath.Join(outDir, "swtrace.nrm2"), "--itrace-folded", folded, "-o", e.Dir)
	post.Env = e.Environ
	if out, err := post.CombinedOutput(); err != nil {
		t.Fatalf("post --itrace-folded: %v\n%s", err, out)
	}
	fb, err := os.ReadFile(folded)
	if err != nil {
		t.Fatal(err)
	}
	stacks := map[string]uint64{}
	var mainLines []string
	for _, l := range strings.Split(strings.TrimSpace(string(fb)), "\n") {
		i := strings.LastIndexByte(l, ' ')
		v, _ := strconv.ParseUint(l[i+1:], 10, 64)
		if j := strings.Index(l[:i], ";main;"); j >= 0 {
			stacks[l[j+1:i]] += v
			mainLines = append(mainLines, l[j+1:])
		}
	}
	for _, s := range []string{"main;sib_flush;sib_compress;sib_emit;sib_mix", "main;sib_a;sib_b;sib_c", "main;sib_crc;crc32;crc32_z"} {
		if stacks[s] == 0 {
			t.Errorf("folded: no instructions under %s; below main:\n%s", s, strings.Join(mainLines, "\n"))
		}
	}
	for s := range stacks {
		if strings.HasPrefix(s, "main;sib_emit") || strings.HasPrefix(s, "main;sib_compress") || strings.HasPrefix(s, "main;sib_c") && !strings.HasPrefix(s, "main;sib_crc") {
			t.Errorf("folded: %s: a sibling-called function under the wrong caller", s)
		}
	}
	if stacks["main;sib_flush;sib_compress;sib_emit"] != want["sib_emit"].Self {
		t.Errorf("folded: main;sib_flush;sib_compress;sib_emit %d instructions, want sib_emit's exclusive %d (callgrind)",
			stacks["main;sib_flush;sib_compress;sib_emit"], want["sib_emit"].Self)
	}
}
