package main

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"perfinsp/internal/tracetest"
)

// tlEvent is one trace event, decoded apart from the writer.
type tlEvent struct {
	Ph   string          `json:"ph"`
	Pid  *uint64         `json:"pid"`
	Tid  *uint64         `json:"tid"`
	Name string          `json:"name"`
	Cat  string          `json:"cat"`
	Ts   *float64        `json:"ts"`
	Dur  float64         `json:"dur"`
	S    string          `json:"s"`
	Sf   json.RawMessage `json:"sf"`
	Args map[string]any  `json:"args"`
}

// tlDoc is what checkTimeline finds in a time line.
type tlDoc struct {
	samples     []tlEvent
	callBegins  int            // B events of category "call"
	maxDepth    int            // deepest nesting of B/E slices on a track
	slices      map[string]int // B events by name
	threadNames map[[2]uint64]string
	instrOf     map[string][]float64 // the instructions of each call slice's end, by name
	events      []tlEvent
}

// checkTimeline decodes a --timeline file as the trace-event format
// defines it, and fails the test where a viewer would meet something
// wrong: a B/E pair that does not nest on its track, an E with no B, a
// B never ended, time going back on a track's slices, an X with a
// negative duration, a sample whose stack frame is not in stackFrames or
// whose stack is not the one its frames make, a track without its name.
func checkTimeline(t *testing.T, path string) tlDoc {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		DisplayTimeUnit string    `json:"displayTimeUnit"`
		TraceEvents     []tlEvent `json:"traceEvents"`
		StackFrames     map[string]struct {
			Name     string `json:"name"`
			Category string `json:"category"`
			Parent   string `json:"parent"`
		} `json:"stackFrames"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%s is not JSON: %v", path, err)
	}
	// the browser's JSON parser too (node's), where node is installed
	// (scripts/deps/post.txt)
	if _, err := exec.LookPath("node"); err == nil || os.Getenv("CI") == "true" {
		out, err := exec.Command("node", "-e", `const d = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")); console.log(d.traceEvents.length)`, path).CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != strconv.Itoa(len(doc.TraceEvents)) {
			t.Fatalf("node's JSON.parse of %s: %v %s (want %d events)", path, err, out, len(doc.TraceEvents))
		}
	}
	d := tlDoc{slices: map[string]int{}, threadNames: map[[2]uint64]string{}, instrOf: map[string][]float64{}, events: doc.TraceEvents}
	type open struct {
		name string
		ts   float64
	}
	stacks := map[[2]uint64][]open{}
	last := map[[2]uint64]float64{}
	used := map[[2]uint64]bool{}
	for i, ev := range doc.TraceEvents {
		if ev.Pid == nil || ev.Tid == nil {
			t.Fatalf("event %d has no pid or tid: %+v", i, ev)
		}
		k := [2]uint64{*ev.Pid, *ev.Tid}
		if ev.Ph == "M" {
			if ev.Name == "thread_name" {
				n, _ := ev.Args["name"].(string)
				if n == "" {
					t.Errorf("event %d: thread %v named %q", i, k, n)
				}
				d.threadNames[k] = n
			}
			continue
		}
		if ev.Ts == nil {
			t.Fatalf("event %d has no ts: %+v", i, ev)
		}
		used[k] = true
		ts := *ev.Ts
		switch ev.Ph {
		case "B", "E":
			if ts < last[k] {
				t.Fatalf("event %d (%s %s) on %v at %.3f µs, after one at %.3f", i, ev.Ph, ev.Name, k, ts, last[k])
			}
			last[k] = ts
			if ev.Ph == "B" {
				if ev.Name == "" {
					t.Fatalf("event %d: a slice without a name", i)
				}
				stacks[k] = append(stacks[k], open{ev.Name, ts})
				d.maxDepth = max(d.maxDepth, len(stacks[k]))
				d.slices[ev.Name]++
				if ev.Cat == "call" {
					d.callBegins++
				}
				continue
			}
			s := stacks[k]
			if len(s) == 0 {
				t.Fatalf("event %d: E on %v at %.3f with no slice open", i, k, ts)
			}
			n, ok := ev.Args["instructions"].(float64)
			if !ok {
				t.Fatalf("event %d: E without its instructions: %+v", i, ev)
			}
			d.instrOf[s[len(s)-1].name] = append(d.instrOf[s[len(s)-1].name], n)
			stacks[k] = s[:len(s)-1]
		case "X":
			if ev.Dur < 0 {
				t.Fatalf("event %d: X of %.3f µs", i, ev.Dur)
			}
		case "i":
			if ev.S != "t" {
				t.Fatalf("event %d: an instant of scope %q, not the thread's", i, ev.S)
			}
			// its stack: the frames from sf to the root
			var id string
			if err := json.Unmarshal(ev.Sf, &id); err != nil {
				var n int
				if err := json.Unmarshal(ev.Sf, &n); err != nil {
					t.Fatalf("event %d: sf %s", i, ev.Sf)
				}
				id = strconv.Itoa(n)
			}
			var frames []string
			for id != "" {
				f, ok := doc.StackFrames[id]
				if !ok {
					t.Fatalf("event %d: stack frame %q not in stackFrames", i, id)
				}
				frames = append([]string{f.Name}, frames...)
				id = f.Parent
				if len(frames) > 10000 {
					t.Fatalf("event %d: a loop in stackFrames", i)
				}
			}
			if frames[len(frames)-1] != ev.Name {
				t.Fatalf("event %d named %q, its stack's leaf is %q", i, ev.Name, frames[len(frames)-1])
			}
			if s, _ := ev.Args["stack"].(string); s != strings.Join(frames, ";") {
				t.Fatalf("event %d: stack argument %q, its frames %q", i, s, strings.Join(frames, ";"))
			}
			d.samples = append(d.samples, ev)
		default:
			t.Fatalf("event %d: phase %q", i, ev.Ph)
		}
	}
	for k, s := range stacks {
		if len(s) > 0 {
			t.Fatalf("track %v: %d slices never ended (%s first)", k, len(s), s[0].name)
		}
	}
	for k := range used {
		if d.threadNames[k] == "" {
			t.Errorf("track %v has events but no name", k)
		}
	}
	return d
}

var ticksRE = regexp.MustCompile(`tprof\.out \((\d+) ticks\)`)

// tprofTicks runs post -tprof on nrm (args: the selection) and returns
// its tick count.
func tprofTicks(t *testing.T, dir, nrm string, args ...string) int {
	t.Helper()
	out, errs, code := runPost(t, dir, append([]string{"-r", nrm, "-tprof"}, args...)...)
	m := ticksRE.FindStringSubmatch(out)
	if code != 0 || m == nil {
		t.Fatalf("post -tprof: %d %s %s", code, out, errs)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// itraceCalls runs post -itrace on nrm and returns the sum of
// itrace.out's CALLS column.
func itraceCalls(t *testing.T, dir, nrm string) uint64 {
	t.Helper()
	out := filepath.Join(dir, "it")
	if o, errs, code := runPost(t, out, "-r", nrm, "-itrace"); code != 0 {
		t.Fatalf("post -itrace: %d %s %s", code, o, errs)
	}
	f, err := os.Open(filepath.Join(out, "itrace.out"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var sum uint64
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		switch {
		case strings.HasPrefix(strings.TrimSpace(l), "CALLS"):
			in = true
		case in && l == "":
			return sum
		case in:
			n, err := strconv.ParseUint(strings.Fields(l)[0], 10, 64)
			if err != nil {
				t.Fatalf("itrace.out: %q", l)
			}
			sum += n
		}
	}
	t.Fatal("itrace.out has no function table")
	return 0
}

// The golden trace's 8,000 samples, with their call stacks, are the
// time line's instant events: as many as post -tprof counts ticks, each
// with its stack, and with --pid the selection's.
func TestTimelineSamplesAreTheTicks(t *testing.T) {
	dir := t.TempDir()
	nrm := goldenTrace(t, dir)
	for _, sel := range [][]string{nil, {"--pid", "1003,1010"}} {
		tl := filepath.Join(dir, "timeline.json")
		if out, errs, code := runPost(t, dir, append([]string{"-r", nrm, "--timeline", tl}, sel...)...); code != 0 || !strings.Contains(out, "timeline.json") {
			t.Fatalf("post --timeline: %d %s %s", code, out, errs)
		}
		d := checkTimeline(t, tl)
		want := tprofTicks(t, dir, nrm, sel...)
		if len(d.samples) != want || want == 0 {
			t.Fatalf("%v: %d samples in the time line, post -tprof counts %d ticks", sel, len(d.samples), want)
		}
		deep := 0
		for _, s := range d.samples {
			if sel != nil && *s.Pid != 1003 && *s.Pid != 1010 {
				t.Fatalf("--pid 1003,1010: a sample of pid %d", *s.Pid)
			}
			deep = max(deep, strings.Count(s.Args["stack"].(string), ";")+1)
		}
		if deep < 5 {
			t.Fatalf("%v: the deepest sample stack has %d frames (the trace's go to 10)", sel, deep)
		}
		checkRenamed(t, d.samples)
	}
}

// checkRenamed checks the golden trace's renaming: mid-trace, process
// 1003's function at 0x10000 ("fn_0 0") is loaded again as "replaced".
// Its samples' stacks name it "fn_0 0" before and "replaced" after,
// however many frames they share with the samples before them.
func checkRenamed(t *testing.T, samples []tlEvent) {
	t.Helper()
	before, after := 0, 0
	for _, s := range samples {
		if *s.Pid != 1003 {
			continue
		}
		frames := strings.Split(s.Args["stack"].(string), ";")
		old, renamed := slices.Contains(frames, "fn_0 0"), slices.Contains(frames, "replaced")
		switch {
		case renamed:
			after++
		case old && after > 0:
			t.Fatalf("a sample at %.3f µs names fn_0 0 after the renaming: %q", *s.Ts, frames)
		case old:
			before++
		}
	}
	if before == 0 || after == 0 {
		t.Fatalf("pid 1003: %d stacks with fn_0 0, then %d with its new name (want both)", before, after)
	}
}

// An ITrace of a recursion: each call is one slice, nested as deep as
// the recursion, as many as itrace.out counts calls, each with its
// inclusive instructions.
func TestTimelineITraceCallsNest(t *testing.T) {
	dir := t.TempDir()
	const depth = 200
	nrm := itraceTrace(t, dir, "/nonexistent/deep", depth)
	tl := filepath.Join(dir, "timeline.json")
	if out, errs, code := runPost(t, dir, "-r", nrm, "--timeline", tl); code != 0 {
		t.Fatalf("post --timeline: %d %s %s", code, out, errs)
	}
	d := checkTimeline(t, tl)
	calls := itraceCalls(t, dir, nrm)
	if uint64(d.callBegins) != calls || calls != depth {
		t.Fatalf("%d call slices in the time line, itrace.out counts %d calls (the trace makes %d)", d.callBegins, calls, depth)
	}
	// the base (main) and the depth calls of f on one track
	if d.maxDepth != depth+1 {
		t.Fatalf("slices nest %d deep, want %d (main and %d calls)", d.maxDepth, depth+1, depth)
	}
	// f's activations: the innermost runs 2 instructions to its return,
	// each outer one 5 more (3 to its call, 2 after the return)
	in := d.instrOf["deep+0x2000"]
	if len(in) != depth {
		t.Fatalf("%d ends of f's slices, want %d: %v", len(in), depth, d.slices)
	}
	for i, n := range in {
		if want := float64(5*i + 2); n != want {
			t.Fatalf("f's activation %d (innermost first) ran %.0f instructions, want %.0f", i, n, want)
		}
	}
	for k, n := range d.threadNames {
		if k[1] == 1<<30|900 && n != "deep 900 calls" {
			t.Fatalf("the calls track is named %q", n)
		}
	}
}

// A real trace of the bundled example with call stacks, dispatches and
// interrupts: every tick is a sample, every thread of the example has
// its running slices and a name; then a real ITrace of the ITrace example
// (scripts/run.itrace): as many call slices as itrace.out counts calls,
// nested per thread, apply's calls among them.
func TestTimelineRealTraces(t *testing.T) {
	e := tracetest.Setup(t, "./tools/post")
	dir, sw := e.Dir, e.Sw
	sw("init", "-t", "8M")
	sw("setrate", "1000")
	sw("enable", "--only", "dispatch", "interrupt", "tprof", "callstack")
	sw("on")
	pid, child := e.RunBurn(100)
	sw("off")
	nrm := filepath.Join(dir, "swtrace.nrm2")
	sw("get", nrm)
	tl := filepath.Join(dir, "timeline.json")
	if out, errs, code := runPost(t, dir, "-r", nrm, "--timeline", tl); code != 0 {
		t.Fatalf("post --timeline: %d %s %s", code, out, errs)
	}
	d := checkTimeline(t, tl)
	if want := tprofTicks(t, dir, nrm); len(d.samples) != want || want == 0 {
		t.Fatalf("%d samples in the time line, post -tprof counts %d ticks", len(d.samples), want)
	}
	running, burnSamples := 0, 0
	for _, ev := range d.events {
		if ev.Ph == "X" && ev.Name == "running" && *ev.Pid == uint64(pid) {
			running++
			if d.threadNames[[2]uint64{*ev.Pid, *ev.Tid}] == "" {
				t.Fatalf("running slice of %d/%d, a thread without a name", *ev.Pid, *ev.Tid)
			}
		}
	}
	for _, s := range d.samples {
		if *s.Pid == uint64(pid) && strings.Contains(s.Args["stack"].(string), "main;") {
			burnSamples++
		}
	}
	if running == 0 || burnSamples == 0 {
		t.Fatalf("the example (pid %d): %d running slices, %d samples with main on their stack", pid, running, burnSamples)
	}
	t.Logf("%d samples (%d of the example through main), %d running slices of the example", len(d.samples), burnSamples, running)

	// the same trace in Perfetto's format: the samples, the switches, and
	// each of the example's threads' time on a CPU (made and ended inside
	// the trace) as the JSON's running slices give it
	pft := filepath.Join(dir, "timeline.pftrace")
	out, errs, code := runPost(t, dir, "-r", nrm, "--timeline", pft)
	m := regexp.MustCompile(`(\d+) dispatches`).FindStringSubmatch(out)
	if code != 0 || m == nil {
		t.Fatalf("post --timeline %s: %d %s %s", pft, code, out, errs)
	}
	pd := readPerfetto(t, pft)
	pfSamples, switches := 0, 0
	for _, ev := range pd.events {
		if ev.cat == "sample" {
			pfSamples++
		}
	}
	for _, sw := range pd.switches {
		switches += len(sw)
	}
	if pfSamples != len(d.samples) || strconv.Itoa(switches) != m[1] || switches == 0 {
		t.Fatalf("Perfetto: %d samples, %d switches; JSON %d samples, post read %s dispatches", pfSamples, switches, len(d.samples), m[1])
	}
	runNs := map[uint64]float64{}
	for _, ev := range d.events {
		if ev.Ph == "X" && ev.Name == "running" && (*ev.Pid == uint64(pid) || *ev.Pid == uint64(child)) {
			runNs[*ev.Tid] += ev.Dur * 1000
		}
	}
	on := pd.onCPU()
	for tid, ns := range runNs {
		if float64(on[tid]) < 0.99*ns || float64(on[tid]) > 1.01*ns {
			t.Errorf("thread %d of the example: %d ns on a CPU from sched_switch, %.0f ns running in the JSON", tid, on[tid], ns)
		}
		if pd.treeThreads[tid] == "" {
			t.Errorf("thread %d of the example has no name in the Perfetto process tree", tid)
		}
	}
	if len(runNs) == 0 {
		t.Fatal("no running slice of the example")
	}
	t.Logf("Perfetto: %d switches, %d bytes (JSON %d)", switches, pd.size, fileSize(t, tl))

	needTool(t, "gcc")
	prog := filepath.Join(dir, "itrace")
	if out, err := exec.Command("gcc", "-O2", "-g", "-pthread", "-o", prog, filepath.Join(tracetest.Root(), "examples", "itrace.c"), "-lm").CombinedOutput(); err != nil {
		t.Fatalf("build example: %v\n%s", err, out)
	}
	// run.itrace takes the tools from the tree's bin/ first
	build := exec.Command("go", "build", "-o", filepath.Join(tracetest.Root(), "bin")+"/", "./tools/swtrace", "./tools/post", "./daemon/cmd/pitraced")
	build.Dir = tracetest.Root()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	itDir := filepath.Join(dir, "itrace-out")
	run := exec.Command(filepath.Join(tracetest.Root(), "scripts", "run.itrace"), "-o", itDir, "--", prog, "300")
	run.Env, run.Dir = e.Environ, dir
	if out, err := run.CombinedOutput(); err != nil {
		t.Fatalf("run.itrace: %v\n%s", err, out)
	}
	nrm = filepath.Join(itDir, "swtrace.nrm2")
	if out, errs, code := runPost(t, dir, "-r", nrm, "--timeline", tl); code != 0 {
		t.Fatalf("post --timeline: %d %s %s", code, out, errs)
	}
	d = checkTimeline(t, tl)
	calls := itraceCalls(t, dir, nrm)
	if uint64(d.callBegins) != calls || calls < 300 {
		t.Fatalf("%d call slices in the time line, itrace.out counts %d calls", d.callBegins, calls)
	}
	if d.slices["apply"] == 0 || d.slices["op_add"]+d.slices["op_mul"] == 0 {
		t.Fatalf("no slice of apply, op_add or op_mul: %v", d.slices)
	}
	t.Logf("ITrace: %d call slices, nested up to %d deep", d.callBegins, d.maxDepth)
}
