package callflow

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// bigThread is n calls of f under main, with an interval too wide for a
// record every 97th event (a sync: some fall across the reader's buffer
// ends) and a wall-clock anchor every 1,000th.
func bigThread(n int) []Event {
	var evs []Event
	t, sp := uint64(1000), uint64(1<<30)
	add := func(kind uint8, fn uint64) {
		e := Event{Kind: kind, Fn: fn, SP: sp, Early: t, Late: t + 7}
		if len(evs)%97 == 96 {
			e.Early += 1 << 33
		}
		if len(evs)%1000 == 0 {
			e.Wall = 5_000_000 + e.Early
		}
		t = e.Late + 13
		if len(evs)%97 == 96 {
			t += 1 << 33
		}
		evs = append(evs, e)
	}
	add(KindEnter, 0xa)
	for i := 0; i < n; i++ {
		sp -= 32
		add(KindEnter, 0xb)
		add(KindExit, 0xb)
		sp += 32
	}
	add(KindExit, 0xa)
	return evs
}

// The streamed file gives the events ParseThread gives, across the
// buffer's ends (syncs split by them included), and its tree is built in
// memory that does not grow with the events.
func TestStreamMatchesParseInBoundedMemory(t *testing.T) {
	evs := bigThread(100000) // 200,002 events, 3.3 MB
	b := encode(evs, 7, 8, -1)
	dir := t.TempDir()
	path := filepath.Join(dir, "hookit-7-8.bin")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	parsed, err := ParseThread(b)
	if err != nil {
		t.Fatal(err)
	}
	th, err := openThread(path)
	if err != nil {
		t.Fatal(err)
	}
	i := 0
	if err := th.Each(func(e *Event) {
		if i < len(parsed.Events) && *e != parsed.Events[i] {
			t.Fatalf("event %d streamed %+v, parsed %+v", i, *e, parsed.Events[i])
		}
		i++
	}); err != nil {
		t.Fatal(err)
	}
	if i != len(evs) || len(parsed.Events) != len(evs) || th.Partial || parsed.Partial {
		t.Fatalf("streamed %d, parsed %d events, want %d (partial %v %v)", i, len(parsed.Events), len(evs), th.Partial, parsed.Partial)
	}
	for k := range evs {
		if parsed.Events[k] != evs[k] {
			t.Fatalf("event %d parsed %+v, want %+v", k, parsed.Events[k], evs[k])
		}
	}
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	tr := Build(th, Calibration{})
	runtime.ReadMemStats(&m1)
	alloc := m1.TotalAlloc - m0.TotalAlloc
	t.Logf("streamed build of %d events (%d bytes): %d bytes allocated", len(evs), len(b), alloc)
	if alloc > uint64(len(b))/8 {
		t.Errorf("building the tree allocated %d bytes for a %d-byte file: want memory bounded by the tree, not the events", alloc, len(b))
	}
	want := Build(parsed, Calibration{})
	if tr.Events != want.Events || tr.Root.Cum != want.Root.Cum || node(tr, 0xa, 0xb).Calls != 100000 {
		t.Errorf("streamed tree: %d events, total %d; in memory: %d, %d", tr.Events, tr.Root.Cum, want.Events, want.Root.Cum)
	}
}

// The Chrome trace, decoded independently: ts is the wall clock of the
// anchors (threads whose CPU time starts alike land where the wall clock
// puts them), every thread and the process are named, every B has its E
// with the slice's inclusive metric.
func TestChromeTraceWallClockAndNames(t *testing.T) {
	mk := func(wall uint64) []Event {
		return []Event{
			{Kind: KindEnter, Fn: 0xa, SP: 1 << 20, Early: 100, Late: 110, Wall: wall},
			{Kind: KindEnter, Fn: 0xb, SP: 1<<20 - 32, Early: 1110, Late: 1120},
			{Kind: KindExit, Fn: 0xb, SP: 1<<20 - 32, Early: 3120, Late: 3130},
			{Kind: KindExit, Fn: 0xa, SP: 1 << 20, Early: 4130, Late: 4140},
		}
	}
	p := &Process{Info: Info{PID: 7, Metric: "task-clock", NsPerUnit: 1, Exe: "/bin/prog"},
		Names:       map[uint64]string{0xa: "main", 0xb: "f \"q\""},
		ThreadNames: map[int]string{7: "prog", 9: "worker"},
		Threads:     []*Thread{{PID: 7, TID: 7, Events: mk(1_000_000)}, {PID: 7, TID: 9, Events: mk(5_000_000)}}}
	var buf bytes.Buffer
	if err := Analyze(p).WriteChrome(&buf); err != nil {
		t.Fatal(err)
	}
	var tr struct {
		TraceEvents []struct {
			Name string
			Ph   string
			Ts   float64
			Pid  int
			Tid  int
			Args map[string]any
		}
	}
	if err := json.Unmarshal(buf.Bytes(), &tr); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, buf.String())
	}
	names := map[int]string{}
	begins := map[int][]float64{}
	open := map[int][]string{}
	var procName string
	for _, e := range tr.TraceEvents {
		switch e.Ph {
		case "M":
			if e.Name == "thread_name" {
				names[e.Tid], _ = e.Args["name"].(string)
			} else if e.Name == "process_name" {
				procName, _ = e.Args["name"].(string)
			}
		case "B":
			begins[e.Tid] = append(begins[e.Tid], e.Ts)
			open[e.Tid] = append(open[e.Tid], e.Name)
		case "E":
			o := open[e.Tid]
			if len(o) == 0 || o[len(o)-1] != e.Name {
				t.Fatalf("E %q on thread %d closes nothing open (%v)", e.Name, e.Tid, o)
			}
			open[e.Tid] = o[:len(o)-1]
			if e.Name == `f "q"` && e.Args["task-clock"] != 2000.0 {
				t.Errorf("f's slice argument %v, want task-clock 2000 (3120 - 1120)", e.Args)
			}
		}
	}
	if procName != "prog" || names[7] != "prog" || names[9] != "worker" {
		t.Errorf("names: process %q, threads %v", procName, names)
	}
	for tid, want := range map[int][]float64{7: {1000, 1001.01}, 9: {5000, 5001.01}} {
		got := begins[tid]
		if len(got) != 2 || got[0] != want[0] || got[1] != want[1] || len(open[tid]) != 0 {
			t.Errorf("thread %d: begins at %v µs, want %v (its anchor's wall clock, then 1,010 ns of metric later); open %v", tid, got, want, open[tid])
		}
	}
}

// log-gen's ERR: calls * (median t_I - t_I) + callees * (median t_O - t_O)
// under the start-up calibration; 0 under the sequence minima.
func TestLogGenErrorBar(t *testing.T) {
	evs := []Event{
		{Kind: KindEnter, Fn: 0xa, SP: 1 << 20, Early: 0, Late: 0},
	}
	ts := uint64(100)
	for i := 0; i < 3; i++ {
		evs = append(evs, Event{Kind: KindEnter, Fn: 0xb, SP: 1<<20 - 32, Early: ts, Late: ts},
			Event{Kind: KindExit, Fn: 0xb, SP: 1<<20 - 32, Early: ts + 50, Late: ts + 50})
		ts += 100
	}
	evs = append(evs, Event{Kind: KindExit, Fn: 0xa, SP: 1 << 20, Early: ts, Late: ts})
	p := &Process{Info: Info{PID: 7, Metric: "task-clock", TInner: 10, TInnerMed: 12, TOuter: 5, TOuterMed: 6},
		Names: map[uint64]string{0xa: "main", 0xb: "f"}, Threads: []*Thread{{PID: 7, TID: 7, Events: evs}}}
	rows := map[string]FlatRow{}
	for _, r := range Analyze(p).Flat() {
		rows[r.Name] = r
	}
	if rows["f"].Err != 6 || rows["main"].Err != 2+3 {
		t.Errorf("ERR: f %.1f (want 3 calls * 2 = 6), main %.1f (want 1 call * 2 + 3 callees * 1 = 5)", rows["f"].Err, rows["main"].Err)
	}
	var buf bytes.Buffer
	if err := Analyze(p).WriteLogGen(&buf); err != nil || !bytes.Contains(buf.Bytes(), []byte(" ERR ")) {
		t.Errorf("log-gen without its ERR column: %v\n%s", err, buf.String())
	}
	m := AnalyzeWith(p, MinimaCalibration(p, SeqKeyPI))
	for _, r := range m.Flat() {
		if r.Err != 0 {
			t.Errorf("%s: ERR %.1f under the sequence minima, want 0", r.Name, r.Err)
		}
	}
}

// The residual against an uninstrumented run's CPU time: (calibrated
// total - plain) / calls, counted per call in ERR on top of the start-up
// spread, printed in log-gen; a metric that is no time is refused.
func TestResidualErrorBar(t *testing.T) {
	evs := []Event{{Kind: KindEnter, Fn: 0xa, SP: 1 << 20}}
	ts := uint64(100)
	for i := 0; i < 3; i++ {
		evs = append(evs, Event{Kind: KindEnter, Fn: 0xb, SP: 1<<20 - 32, Early: ts, Late: ts},
			Event{Kind: KindExit, Fn: 0xb, SP: 1<<20 - 32, Early: ts + 50, Late: ts + 50})
		ts += 100
	}
	evs = append(evs, Event{Kind: KindExit, Fn: 0xa, SP: 1 << 20, Early: ts, Late: ts})
	p := &Process{Info: Info{PID: 7, Metric: "task-clock", NsPerUnit: 1, TInner: 10, TInnerMed: 12, TOuter: 5, TOuterMed: 6},
		Names: map[uint64]string{0xa: "main", 0xb: "f"}, Threads: []*Thread{{PID: 7, TID: 7, Events: evs}}}
	a := Analyze(p)
	total := a.Total() // main 250 - 10 - 3*5 = 225, f 3 * (50 - 10) = 120
	if total != 345 {
		t.Fatalf("total %d, want 345", total)
	}
	if err := a.SetPlain(305); err != nil { // 40 over the plain run: 10 per call of 4
		t.Fatal(err)
	}
	if a.Residual != 10 {
		t.Fatalf("residual %.2f per call, want 10", a.Residual)
	}
	rows := map[string]FlatRow{}
	for _, r := range a.Flat() {
		rows[r.Name] = r
	}
	if rows["f"].Err != 3*10+6 || rows["main"].Err != 10+5 {
		t.Errorf("ERR: f %.1f (want 3 calls * 10 + 6), main %.1f (want 1 * 10 + 5)", rows["f"].Err, rows["main"].Err)
	}
	var buf bytes.Buffer
	if err := a.WriteLogGen(&buf); err != nil || !bytes.Contains(buf.Bytes(), []byte("residual: calibrated total 345 against 305 ")) ||
		!bytes.Contains(buf.Bytes(), []byte("+10.00 ns per call")) {
		t.Errorf("log-gen without the residual: %v\n%s", err, buf.String())
	}
	// Over-corrected: the bar is the residual's size.
	a = Analyze(p)
	if err := a.SetPlain(385); err != nil || a.Residual != -10 || a.ErrorBar(3, 0) != 3*10+6 {
		t.Errorf("plain 385: %v, residual %.2f, bar %.1f", err, a.Residual, a.ErrorBar(3, 0))
	}
	p.Info.NsPerUnit = 0
	if err := Analyze(p).SetPlain(305); err == nil {
		t.Error("a metric that is no time compared with a CPU time")
	}
}
