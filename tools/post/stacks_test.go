package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/google/pprof/profile"

	"perfinsp/internal/testenv"
	"perfinsp/internal/tracetest"
)

// Call stacks of the example (swtrace enable callstack, daemon backend):
// the folded stacks hold its exact call paths with ticks in the ratio it is
// built with, pprof carries them (cum of work ≈ all of the process, flat ≠
// cum), tprof.out gains the call tree, and the SVG flame graph is written.
func TestExampleCallStacks(t *testing.T) {
	e := tracetest.Setup(t)
	dir, sw := e.Dir, e.Sw
	sw("init", "-t", "8M")
	sw("enable", "--only", "tprof", "callstack")
	sw("setrate", "1000")
	sw("on")
	pid, _ := e.RunBurn(150)
	sw("off")
	sw("get", "st.nrm2")
	folded, svg, pb := filepath.Join(dir, "st.folded"), filepath.Join(dir, "st.svg"), filepath.Join(dir, "st.pb.gz")
	if _, errs, code := runPost(t, dir, "-r", filepath.Join(dir, "st.nrm2"), "-tprof", "--pid", strconv.Itoa(pid),
		"--folded", folded, "--flame", svg, "--pprof", pb); code != 0 {
		t.Fatal(errs)
	}
	total := checkExamplePaths(t, folded)
	// pprof: work's cum is (about) the whole process; heavy's flat ≈ cum.
	r, err := os.Open(pb)
	if err != nil {
		t.Fatal(err)
	}
	prof, err := profile.Parse(r)
	r.Close()
	if err != nil {
		t.Fatal(err)
	}
	flat, cum := map[string]int64{}, map[string]int64{}
	var all int64
	for _, s := range prof.Sample {
		all += s.Value[0]
		seen := map[string]bool{}
		for i, l := range s.Location {
			name := l.Line[0].Function.Name
			if i == 0 {
				flat[name] += s.Value[0]
			}
			if !seen[name] {
				cum[name] += s.Value[0]
				seen[name] = true
			}
		}
	}
	if cum["work"] < all*85/100 || flat["work"] > all/20 {
		t.Fatalf("pprof: work flat %d cum %d of %d: stacks not carried", flat["work"], cum["work"], all)
	}
	if cum["via_route"] == 0 || flat["via_route"] > cum["via_route"]/10 {
		t.Fatalf("pprof: via_route flat %d cum %d", flat["via_route"], cum["via_route"])
	}
	out, _ := os.ReadFile(filepath.Join(dir, "tprof.out"))
	if !strings.Contains(string(out), ")) Call_Tree") || !strings.Contains(string(out), " via_route") {
		t.Fatalf("tprof.out has no call tree:\n%s", out)
	}
	b, err := os.ReadFile(svg)
	if err != nil || !strings.Contains(string(b), "<svg") || !strings.Contains(string(b), ">via_route (") {
		t.Fatalf("flame graph: %v\n%.500s", err, b)
	}
	t.Logf("%d ticks of the example", total)
}

// examplePaths reads folded stacks of the example: the ticks per user path
// from main or worker down (kernel frames left out), and all ticks.
func examplePaths(t *testing.T, folded string) (map[string]int, int) {
	t.Helper()
	f, err := os.Open(folded)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	paths := map[string]int{}
	total := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		i := strings.LastIndexByte(line, ' ')
		n, _ := strconv.Atoi(line[i+1:])
		total += n
		frames := strings.Split(line[:i], ";")
		// keep the user frames from main or worker down
		for j, fr := range frames {
			if fr == "main" || fr == "worker" {
				var user []string
				for _, x := range frames[j:] {
					if !strings.HasSuffix(x, "_[k]") {
						user = append(user, x)
					}
				}
				paths[strings.Join(user, ";")] += n
				break
			}
		}
	}
	return paths, total
}

// exampleWant is the example's call paths and their shares of its ticks.
var exampleWant = map[string]float64{
	"main;work;heavy": 30, "worker;work;heavy": 30,
	"main;work;via_route;medium": 15, "worker;work;via_route;medium": 15,
	"main;work;light": 5, "worker;work;light": 5,
}

// checkExamplePaths checks that the folded stacks hold the example's exact
// call paths (most of its ticks) in the ratio it is built with; it returns
// the number of ticks.
func checkExamplePaths(t *testing.T, folded string) int {
	t.Helper()
	paths, total := examplePaths(t, folded)
	sum := 0
	for p := range exampleWant {
		sum += paths[p]
	}
	if total < 300 || sum < total*8/10 {
		t.Fatalf("%d ticks, %d on the expected paths; paths: %v", total, sum, paths)
	}
	for p, share := range exampleWant {
		got := 100 * float64(paths[p]) / float64(sum)
		if got < share-6 || got > share+6 {
			t.Errorf("%s: %.1f %% of the example's stacks, want about %.0f %% (%v)", p, got, share, paths)
		}
	}
	return total
}

// The inclusive shares of the example's functions agree with perf's
// (`perf record -g` + `perf report --children`) on the same run within 2
// points (the threads' roots within 5): both sample it at the same time,
// perf launching it, tprof tracing the system with call stacks.
func TestStacksAgreeWithPerf(t *testing.T) {
	e := tracetest.Setup(t)
	perf, err := exec.LookPath("perf")
	if err != nil {
		testenv.Missing(t, "perf is not installed (scripts/deps: linux-perf)")
	}
	dir, sw := e.Dir, e.Sw
	sw("init", "-t", "16M")
	sw("enable", "--only", "tprof", "callstack")
	sw("setrate", "1000")
	sw("on")
	data := filepath.Join(dir, "perf.data")
	rec := exec.Command(perf, "record", "-q", "-e", "cpu-clock", "-F", "1000", "-g", "-o", data, "--", e.Burn, "200")
	var out bytes.Buffer
	rec.Stdout, rec.Stderr = &out, &out
	if err := rec.Start(); err != nil {
		sw("off")
		t.Fatalf("perf record: %v", err)
	}
	if err := rec.Wait(); err != nil {
		sw("off")
		t.Fatalf("perf record: %v\n%s", err, out.Bytes())
	}
	sw("off")
	sw("get", "both.nrm2")
	folded := filepath.Join(dir, "both.folded")
	// The example perf started: cpuburn in perf's process tree (other
	// tests may run examples of the same name meanwhile).
	if _, errs, code := runPost(t, dir, "-r", filepath.Join(dir, "both.nrm2"), "--pid", strconv.Itoa(rec.Process.Pid), "--comm", "cpuburn", "--folded", folded); code != 0 {
		t.Fatal(errs)
	}
	ours := inclusive(t, folded)
	rep, err := exec.Command(perf, "report", "-i", data, "--children", "--stdio", "--sort", "sym", "-g", "none", "--percent-limit", "0").CombinedOutput()
	if err != nil {
		t.Fatalf("perf report: %v\n%s", err, rep)
	}
	theirs := map[string]float64{}
	for _, l := range strings.Split(string(rep), "\n") {
		f := strings.Fields(l)
		// "  61.23%  0.00%  [.] work"
		if len(f) >= 4 && strings.HasSuffix(f[0], "%") && f[2] == "[.]" {
			v, err := strconv.ParseFloat(strings.TrimSuffix(f[0], "%"), 64)
			if err == nil {
				theirs[f[3]] = v
			}
		}
	}
	for _, fn := range []string{"work", "heavy", "via_route", "medium", "light", "main", "worker"} {
		d := ours[fn] - theirs[fn]
		t.Logf("%-10s tprof %6.2f %%  perf %6.2f %%  (%+.2f)", fn, ours[fn], theirs[fn], d)
		// main and worker are the two threads' roots: where they share
		// a CPU they run in scheduler quanta of milliseconds, and the
		// two samplers (per CPU, per task) catch different quanta, so
		// the split between threads varies more than the functions'
		// shares within them, which interleave finely.
		tol := 2.0
		if fn == "main" || fn == "worker" {
			tol = 5
		}
		if theirs[fn] == 0 || d > tol || d < -tol {
			t.Errorf("%s: inclusive %.2f %% against perf's %.2f %%", fn, ours[fn], theirs[fn])
		}
	}
}

// inclusive reads folded stacks into each function's inclusive share (%).
func inclusive(t *testing.T, path string) map[string]float64 {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	total := 0
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		i := strings.LastIndexByte(l, ' ')
		n, _ := strconv.Atoi(l[i+1:])
		total += n
		seen := map[string]bool{}
		for _, fr := range strings.Split(l[:i], ";")[1:] {
			if !seen[fr] {
				counts[fr] += n
				seen[fr] = true
			}
		}
	}
	out := map[string]float64{}
	for fn, n := range counts {
		out[fn] = 100 * float64(n) / float64(total)
	}
	return out
}

// A stack deeper than the depth limit is kept cut and marked: in the
// folded stacks, in tprof.out's call tree header and in pprof's labels.
func TestStackDepthLimitMarksTruncated(t *testing.T) {
	e := tracetest.Setup(t)
	dir, sw := e.Dir, e.Sw
	sw("init", "-t", "8M")
	sw("enable", "--only", "--depth", "3", "tprof", "callstack")
	sw("on")
	pid, _ := e.RunBurn(40)
	sw("off")
	sw("get", "d.nrm2")
	folded := filepath.Join(dir, "d.folded")
	if _, errs, code := runPost(t, dir, "-r", filepath.Join(dir, "d.nrm2"), "-tprof", "--pid", strconv.Itoa(pid), "--no-children", "--folded", folded); code != 0 {
		t.Fatal(errs)
	}
	b, _ := os.ReadFile(folded)
	cut, all := 0, 0
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		i := strings.LastIndexByte(l, ' ')
		n, _ := strconv.Atoi(l[i+1:])
		all += n
		frames := strings.Split(l[:i], ";")
		// process, [truncated], at most 3 frames recorded, and the caller
		// a frameless leaf lost, put back from its call-frame information
		// (a tick in ld.so's strlen had it)
		if len(frames) > 1+1+3+1 {
			t.Fatalf("a stack of more than 3 frames with --depth 3: %s", l)
		}
		if len(frames) > 1 && frames[1] == "[truncated]" {
			cut += n
		}
	}
	// main -> work -> heavy -> account ... is deeper than 3 frames.
	if all < 100 || cut < all*8/10 {
		t.Fatalf("%d of %d stacks marked truncated at depth 3", cut, all)
	}
	out, _ := os.ReadFile(filepath.Join(dir, "tprof.out"))
	if !regexp.MustCompile(`\((\d+) cut at the depth limit\)`).Match(out) || strings.Contains(string(out), "(0 cut at the depth limit)") {
		t.Fatalf("tprof.out does not count the truncated stacks:\n%.2000s", out)
	}
	if o, code := e.SwCode("enable", "--depth", "500", "callstack"); code == 0 || !strings.Contains(o, "1..127") {
		t.Fatalf("depth 500 accepted: %s", o)
	}
}
