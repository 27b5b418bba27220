package offcpu

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"math/rand"
	"slices"
	"strings"
	"testing"

	"perfinsp/format/trace"
)

const ms1 = uint64(1e6)

type recs struct{ all []trace.Record }

func (r *recs) add(cpu int, t uint64, major uint16, minor uint32, str string, f ...uint64) {
	r.all = append(r.all, trace.Record{Major: major, Minor: minor, Time: t, Fixed: f, Str: str, CPU: cpu})
}
func (r *recs) sw(cpu int, t uint64, prev, next uint32, st uint64) {
	r.add(cpu, t, trace.MajorDispatch, trace.DispatchSwitch, "", 100, uint64(prev), 100, uint64(next), st)
}
func (r *recs) wake(cpu int, t uint64, tid uint32) {
	r.add(cpu, t, trace.MajorDispatch, trace.DispatchWakeup, "", 100, uint64(tid), uint64(cpu), 0, 0, 0)
}
func (r *recs) stack(cpu int, t uint64, tid uint32, kernel int, pcs ...uint64) {
	b := make([]byte, 8*len(pcs))
	for i, pc := range pcs {
		binary.LittleEndian.PutUint64(b[8*i:], pc)
	}
	r.add(cpu, t, trace.MajorUnwind, trace.UnwindSwitch, string(b), 100, uint64(tid), uint64(kernel)<<trace.UnwindKernShift)
}

func names(pid uint32, pc uint64, kernel bool) string {
	switch pc &^ 0xf {
	case 0x1000:
		return "schedule"
	case 0x2000:
		return "nanosleep"
	case 0x3000:
		return "main"
	case 0x4000:
		return "pipe_read"
	case 0x5000:
		return "read_loop"
	}
	return ""
}

// Two threads on one CPU: 101 sleeps 10 ms (woken, then 1 ms on the run
// queue), 102 runs and is preempted, 103 reads a pipe (D for the test).
func scenario() *recs {
	r := &recs{}
	r.add(0, 0, trace.MajorSys, trace.SysTraceOn, "", 0, 0)
	r.sw(0, 2*ms1, 101, 102, trace.StateSleeping) // 101 ran 2 ms, sleeps
	r.stack(0, 2*ms1, 101, 2, 0x1000, 0x2008, 0x3008)
	r.wake(0, 12*ms1, 101)                             // woken after 10 ms
	r.sw(0, 13*ms1, 102, 101, 0x100)                   // 102 preempted (R+), 101 runs after 1 ms on the queue
	r.sw(0, 15*ms1, 101, 102, trace.StateBlocked)      // 101 blocks
	r.stack(0, 15*ms1, 101, 1, 0x4000, 0x5008, 0x3008) // pipe_read in read_loop in main
	r.add(0, 16*ms1, trace.MajorInterrupt, trace.IntrHard, "", 9)
	r.add(0, 16*ms1+500_000, trace.MajorInterrupt, trace.IntrHard|trace.ExitBit, "", 9)
	r.wake(0, 20*ms1, 101)
	r.sw(0, 20*ms1+200_000, 102, 101, 0x100)
	r.add(0, 30*ms1, trace.MajorSys, trace.SysTraceOff, "")
	return r
}

func run(r *recs) *Analyzer {
	a := New(names)
	for i := range r.all {
		a.Record(&r.all[i])
	}
	a.Finish(0)
	return a
}

func TestStatesAddUp(t *testing.T) {
	a := run(scenario())
	byTid := map[uint32]*Thread{}
	for _, th := range a.Threads() {
		byTid[th.TID] = th
		var sum uint64
		for _, v := range th.Time {
			sum += v
		}
		if sum != th.Lifetime() || th.Lifetime() != 30*ms1 {
			t.Errorf("thread %d: states add up to %d, lifetime %d (want 30 ms)", th.TID, sum, th.Lifetime())
		}
	}
	t101, t102 := byTid[101], byTid[102]
	want := [NStates]uint64{Running: 2*ms1 + 2*ms1 + (30*ms1 - 20*ms1 - 200_000), RunQueue: ms1 + 200_000, Sleeping: 10 * ms1, Blocked: 5 * ms1}
	if t101.Time != want {
		t.Errorf("101: %v, want %v", t101.Time, want)
	}
	if t101.Voluntary != 2 || t101.Involuntary != 0 || t102.Involuntary != 2 {
		t.Errorf("switches: 101 %d/%d, 102 %d/%d", t101.Voluntary, t101.Involuntary, t102.Voluntary, t102.Involuntary)
	}
	if t101.Wake.Count() != 2 || t101.Wake.Max() != ms1 || t101.Wake.Percentile(0.5) != 200_000 {
		t.Errorf("101 wake-ups %v", t101.Wake.Ns)
	}
	// 102 ran from 2 to 13 ms, with the interrupt inside
	if t102.IRQ != 500_000 || t101.IRQ != 0 || a.CPUIntr[0].IRQ != 500_000 {
		t.Errorf("interrupt time: 102 %d, 101 %d, CPU %+v", t102.IRQ, t101.IRQ, a.CPUIntr[0])
	}
	// 102: not seen before 2 ms (it was not on CPU 0), then runs to 13,
	// waits preempted to 15, runs to 20.2, waits to the end.
	want = [NStates]uint64{Running: 11*ms1 + 5*ms1 + 200_000, RunQueue: 2*ms1 + 9*ms1 + 800_000, Unknown: 2 * ms1}
	if t102.Time != want {
		t.Errorf("102: %v, want %v", t102.Time, want)
	}
	if t102.Preempt.Count() != 1 || t102.Preempt.Ns[0] != 2*ms1 {
		t.Errorf("102 preempted waits %v", t102.Preempt.Ns)
	}
}

func TestOffCPUProfile(t *testing.T) {
	a := run(scenario())
	got := map[string]uint64{}
	for _, c := range a.OffCPU() {
		if c.Thread.TID == 101 {
			got[c.State.String()+":"+strings.Join(c.Stack, ";")] += c.Ns
		}
	}
	want := map[string]uint64{
		"sleeping:main;nanosleep_[k];schedule_[k]": 10 * ms1,
		"runqueue:main;nanosleep_[k];schedule_[k]": ms1,
		"blocked:main;read_loop;pipe_read_[k]":     5 * ms1,
		"runqueue:main;read_loop;pipe_read_[k]":    200_000,
	}
	if len(got) != len(want) {
		t.Fatalf("off-CPU cells of 101: %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %d ns, want %d (all: %v)", k, got[k], v, got)
		}
	}
	var buf bytes.Buffer
	if err := WriteFolded(&buf, a.OffCPU(), func(uint32) string { return "prog" }); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "prog;?-101;[sleeping];main;nanosleep_[k];schedule_[k] 10000000\n") {
		t.Errorf("folded:\n%s", buf.String())
	}
}

// The wall-clock profile adds up to each thread's lifetime.
func TestWallAddsUp(t *testing.T) {
	r := scenario()
	// ticks of 101 while it ran (after 20.2 ms): 3 in main, 1 elsewhere
	for i := 0; i < 3; i++ {
		r.add(0, 21*ms1+uint64(i)*ms1, trace.MajorTprof, trace.TprofTick, "", 100, 101, 0x3000, 0)
	}
	r.add(0, 25*ms1, trace.MajorTprof, trace.TprofTick, "", 100, 101, 0x5000, 0)
	// keep time order
	off := r.all[len(r.all)-5]
	copy(r.all[len(r.all)-5:], r.all[len(r.all)-4:])
	r.all[len(r.all)-1] = off
	a := run(r)
	sum := map[uint32]uint64{}
	var main101 uint64
	for _, c := range a.Wall() {
		sum[c.Thread.TID] += c.Ns
		if c.Thread.TID == 101 && c.State == Running && strings.Join(c.Stack, ";") == "main" {
			main101 = c.Ns
		}
	}
	for _, th := range a.Threads() {
		if sum[th.TID] != th.Lifetime() {
			t.Errorf("thread %d: wall profile %d ns, lifetime %d", th.TID, sum[th.TID], th.Lifetime())
		}
	}
	run101 := a.threads[101].Time[Running]
	if main101 != run101*3/4 && main101 != run101*3/4+1 {
		t.Errorf("101 in main: %d ns of %d running (3 ticks of 4)", main101, run101)
	}
	var buf bytes.Buffer
	if err := WritePprof(&buf, a.Wall(), "wall", func(uint32) string { return "prog" }); err != nil {
		t.Fatal(err)
	}
}

func TestHistBuckets(t *testing.T) {
	l := Latencies{Ns: []uint64{0, 999, 1000, 1999, 2000, 3999, 4000, 1_000_000}}
	h := l.Hist()
	want := []uint64{4, 2, 1, 0, 0, 0, 0, 0, 0, 1} // 0-1, 2-3, 4-7, ..., 512-1023 µs
	if len(h) != len(want) {
		t.Fatalf("hist %v, want %v", h, want)
	}
	for i := range h {
		if h[i] != want[i] {
			t.Fatalf("hist %v, want %v", h, want)
		}
	}
	if l.Percentile(0.5) != 1999 || l.Max() != 1_000_000 {
		t.Errorf("p50 %d max %d", l.Percentile(0.5), l.Max())
	}
}

// The longest wake-ups are those of the selected threads, longest first.
func TestWorstOfSelected(t *testing.T) {
	a := run(scenario())
	w := a.Worst()
	if len(w) != 2 || w[0].Ns != ms1 || w[0].TID != 101 || w[0].From != 12*ms1 || w[1].Ns != 200_000 {
		t.Fatalf("worst %+v", w)
	}
	a.Select(func(th *Thread) bool { return th.TID == 102 })
	if w := a.Worst(); len(w) != 0 || len(a.Threads()) != 1 {
		t.Fatalf("after selecting 102: worst %+v, threads %d", w, len(a.Threads()))
	}
}

// The time line of each thread covers its life without gaps or overlaps,
// and is valid trace-event JSON.
func TestTimeline(t *testing.T) {
	a := New(names)
	a.KeepSpans = true
	r := scenario()
	for i := range r.all {
		a.Record(&r.all[i])
	}
	a.Finish(0)
	next := map[uint32]uint64{}
	covered := map[uint32]uint64{}
	for _, sp := range a.Spans() {
		tid := sp.Thread.TID
		if sp.Start != next[tid] || sp.End <= sp.Start {
			t.Fatalf("thread %d: span %v-%v %v after %v", tid, sp.Start, sp.End, sp.State, next[tid])
		}
		next[tid] = sp.End
		covered[tid] += sp.End - sp.Start
	}
	for _, th := range a.Threads() {
		if covered[th.TID] != th.Lifetime() {
			t.Errorf("thread %d: time line %d ns, life %d", th.TID, covered[th.TID], th.Lifetime())
		}
	}
	var buf bytes.Buffer
	if err := a.WriteTimeline(&buf, func(uint32) string { return "prog" }, nil); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		TraceEvents []map[string]any `json:"traceEvents"`
	}
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatalf("timeline JSON: %v\n%s", err, buf.String())
	}
	var sleep, irq bool
	for _, e := range doc.TraceEvents {
		sleep = sleep || e["name"] == "sleeping" && e["tid"] == float64(101) && e["ts"] == float64(2000) && e["dur"] == float64(10000)
		irq = irq || e["name"] == "irq" && e["dur"] == float64(500)
	}
	if !sleep || !irq {
		t.Errorf("timeline lacks 101's sleep (2 ms, 10 ms long) or the interrupt:\n%s", buf.String())
	}
}

// A kernel that does not report a switch-in from the idle task: 101
// sleeps 10 ms, runs 1 ms and sleeps again with only its switch-outs in
// the trace. The 11 ms between them are not known to be a wait: they are
// Unknown and in no profile, and the missing switch-in is counted; with
// the switch-in they are 10 ms sleeping and 1 ms running.
func TestLostSwitchIn(t *testing.T) {
	for _, withIn := range []bool{false, true} {
		r := &recs{}
		r.add(0, 0, trace.MajorSys, trace.SysTraceOn, "", 0, 0)
		r.sw(0, 2*ms1, 101, 0, trace.StateSleeping)
		r.stack(0, 2*ms1, 101, 2, 0x1000, 0x2008, 0x3008)
		if withIn {
			r.sw(0, 12*ms1, 0, 101, 0)
		}
		r.sw(0, 13*ms1, 101, 0, trace.StateSleeping)
		r.add(0, 20*ms1, trace.MajorSys, trace.SysTraceOff, "")
		a := run(r)
		var th *Thread
		for _, x := range a.Threads() {
			if x.TID == 101 {
				th = x
			}
		}
		var slept uint64
		for _, c := range a.OffCPU() {
			if c.Thread.TID == 101 && c.State == Sleeping {
				slept += c.Ns
			}
		}
		want := [NStates]uint64{Running: 3 * ms1, Sleeping: 17 * ms1}
		wantLost, wantSlept := uint64(0), 17*ms1
		if !withIn {
			want = [NStates]uint64{Running: 2 * ms1, Unknown: 11 * ms1, Sleeping: 7 * ms1}
			wantLost, wantSlept = 1, 7*ms1
		}
		if th.Time != want || a.LostSwitchIns != wantLost || slept != wantSlept {
			t.Errorf("switch-in recorded %v: states %v (want %v), lost switch-ins %d (want %d), sleeping in the profile %d ns (want %d)",
				withIn, th.Time, want, a.LostSwitchIns, wantLost, slept, wantSlept)
		}
	}
}

// A thread whose switches the kernel does not report (its switch-outs
// known only from the next thread's switch-in, StateUnknown) is Unknown
// from each switch-out to the next, neither a voluntary nor an
// involuntary switch and no lost switch-in, and not running before its
// first switch-out either; the threads it switches to
// are accounted as ever.
func TestUnreportedSwitches(t *testing.T) {
	r := &recs{}
	r.add(0, 0, trace.MajorSys, trace.SysTraceOn, "", 0, 0)
	r.sw(0, 1*ms1, 101, 0, trace.StateSleeping)
	r.sw(0, 5*ms1, 201, 101, trace.StateUnknown)
	r.sw(0, 7*ms1, 101, 0, trace.StateSleeping)
	r.sw(0, 9*ms1, 201, 101, trace.StateUnknown)
	r.sw(0, 10*ms1, 101, 0, trace.StateSleeping)
	r.add(0, 12*ms1, trace.MajorSys, trace.SysTraceOff, "")
	a := run(r)
	got := map[uint32]*Thread{}
	for _, x := range a.Threads() {
		got[x.TID] = x
	}
	user, hidden := got[101], got[201]
	if user == nil || hidden == nil {
		t.Fatalf("threads %v", got)
	}
	if want := ([NStates]uint64{Running: 4 * ms1, Sleeping: 8 * ms1}); user.Time != want || user.Voluntary != 3 {
		t.Errorf("thread 101: states %v (want %v), %d voluntary switches (want 3)", user.Time, want, user.Voluntary)
	}
	if want := ([NStates]uint64{Unknown: 12 * ms1}); hidden.Time != want || hidden.Voluntary+hidden.Involuntary != 0 {
		t.Errorf("thread 201: states %v (want %v), %d voluntary and %d involuntary switches (want none)", hidden.Time, want, hidden.Voluntary, hidden.Involuntary)
	}
	if a.LostSwitchIns != 0 {
		t.Errorf("%d lost switch-ins, want 0", a.LostSwitchIns)
	}
}

// A switch stack marked unwound by call-frame information is counted so,
// in sched.out's head line and sched.json.
func TestSwitchStacksCFICounted(t *testing.T) {
	r := scenario()
	for i := range r.all {
		if rec := &r.all[i]; rec.Major == trace.MajorUnwind && rec.Time == 15*ms1 {
			rec.Fixed[2] |= trace.UnwindCFI
		}
	}
	a := run(r)
	if a.SwitchStacks != 2 || a.SwitchStacksCFI != 1 {
		t.Fatalf("%d switch stacks, %d by call-frame information; want 2, 1", a.SwitchStacks, a.SwitchStacksCFI)
	}
	var text, js bytes.Buffer
	if err := a.WriteText(&text, func(uint32) string { return "prog" }); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "2 switch stacks (1 by call-frame information)") {
		t.Errorf("sched.out:\n%.400s", text.String())
	}
	if err := a.WriteJSON(&js, func(uint32) string { return "prog" }); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Stacks    uint64 `json:"switch_stacks"`
		StacksCFI uint64 `json:"switch_stacks_cfi"`
	}
	if err := json.Unmarshal(js.Bytes(), &doc); err != nil || doc.Stacks != 2 || doc.StacksCFI != 1 {
		t.Errorf("sched.json: %+v (%v)", doc, err)
	}
}

// StatesOnly (a time line's analyzer) writes the same time line as a full
// analysis of records with ticks, and names no tick: its namer is never
// asked and no stack is interned.
func TestStatesOnlySameTimeline(t *testing.T) {
	r := scenario()
	tick := func(cpu int, at uint64, tid uint32, pc uint64) {
		r.add(cpu, at, trace.MajorTprof, 0, "", 100, uint64(tid), pc, 0)
	}
	r.all = r.all[:len(r.all)-1] // the trace's end after the ticks
	tick(0, 1*ms1, 101, 0x3000)
	tick(0, 14*ms1, 101, 0x5000)
	tick(1, 14*ms1, 104, 0x3000) // on CPU 1 since the trace began
	tick(0, 25*ms1, 101, 0x3000)
	r.add(0, 30*ms1, trace.MajorSys, trace.SysTraceOff, "")
	slices.SortStableFunc(r.all, func(a, b trace.Record) int { return cmp.Compare(a.Time, b.Time) })
	timeline := func(statesOnly bool) (string, *Analyzer) {
		asked := 0
		a := New(func(pid uint32, pc uint64, kernel bool) string { asked++; return names(pid, pc, kernel) })
		a.KeepSpans, a.StatesOnly = true, statesOnly
		for i := range r.all {
			a.Record(&r.all[i])
		}
		a.Finish(0)
		var buf bytes.Buffer
		if err := a.WriteTimeline(&buf, func(uint32) string { return "prog" }, nil); err != nil {
			t.Fatal(err)
		}
		if statesOnly && (asked != 0 || len(a.stacks) != 1) {
			t.Fatalf("states only: namer asked %d times, %d stacks interned", asked, len(a.stacks)-1)
		}
		if !statesOnly && asked == 0 {
			t.Fatal("the full analysis named no tick: the test's ticks are not read")
		}
		return buf.String(), a
	}
	full, fa := timeline(false)
	states, sa := timeline(true)
	if full != states {
		t.Fatalf("time line with ticks named:\n%s\nstates only:\n%s", full, states)
	}
	if fa.Ticks != 4 || sa.Ticks != 4 || !strings.Contains(states, `"tid":104`) {
		t.Fatalf("ticks %d and %d (want 4), thread 104 (known by its tick only) in the time line: %v", fa.Ticks, sa.Ticks, strings.Contains(states, `"tid":104`))
	}
}

// A thread id used again (pid_max wraps; short-lived threads and
// processes): the waits of the thread that ended stay its own, in its
// process, and each thread's cells of the wall-clock profile add up to
// its life. Process 100's thread 105 sleeps 4 ms and exits; process 200
// then makes a thread 105 that sleeps 1 ms.
func TestTidUsedAgain(t *testing.T) {
	r := &recs{}
	r.add(0, 0, trace.MajorSys, trace.SysTraceOn, "", 0, 0)
	r.sw(0, 1*ms1, 0, 105, 0)
	r.sw(0, 2*ms1, 105, 0, trace.StateSleeping)
	r.stack(0, 2*ms1, 105, 1, 0x1000, 0x2008)
	r.wake(0, 6*ms1, 105)
	r.sw(0, 6*ms1, 0, 105, 0)
	r.sw(0, 7*ms1, 105, 0, trace.StateDead)
	r.add(0, 8*ms1, trace.MajorMTE, trace.MTEFork, "", 200, 200, 200, 105, 1)
	r.add(0, 9*ms1, trace.MajorDispatch, trace.DispatchSwitch, "", 0, 0, 200, 105, 0)
	r.add(0, 10*ms1, trace.MajorDispatch, trace.DispatchSwitch, "", 200, 105, 0, 0, trace.StateSleeping)
	r.add(0, 11*ms1, trace.MajorDispatch, trace.DispatchWakeup, "", 200, 105, 0, 0, 0, 0)
	r.add(0, 11*ms1, trace.MajorDispatch, trace.DispatchSwitch, "", 0, 0, 200, 105, 0)
	r.add(0, 12*ms1, trace.MajorSys, trace.SysTraceOff, "")
	a := run(r)
	var ths []*Thread
	for _, th := range a.Threads() {
		if th.TID == 105 {
			ths = append(ths, th)
		}
	}
	if len(ths) != 2 || ths[0].PID != 100 || ths[1].PID != 200 {
		t.Fatalf("threads 105: %+v", ths)
	}
	sleep := map[uint32]uint64{}
	for _, c := range a.OffCPU() {
		if c.State == Sleeping {
			sleep[c.Thread.PID] += c.Ns
		}
	}
	if sleep[100] != 4*ms1 || sleep[200] != 1*ms1 {
		t.Errorf("sleeping ns of thread 105 by process: %v, want 100: 4 ms, 200: 1 ms", sleep)
	}
	sum := map[*Thread]uint64{}
	for _, c := range a.Wall() {
		sum[c.Thread] += c.Ns
	}
	for _, th := range ths {
		if sum[th] != th.Lifetime() {
			t.Errorf("thread 105 of %d: wall-clock cells %d ns, life %d", th.PID, sum[th], th.Lifetime())
		}
	}
}

// A thread whose switch-out is not in the trace (a lost record, or a
// thread the kernel hides from perf: its switch-in is written, and the
// switch that follows on its CPU names the idle task as prev) is not
// counted running until its next record: it ran up to its last tick,
// its time from there is unknown, and the threads' running time on one
// CPU stays within the trace. 59 runs from 1 ms (a tick at 1.5 ms); the
// CPU's next switch, at 10 ms, is from the idle task to 15; 59 runs
// again from 15 ms (its switch-in only) to 16 ms, where it is switched
// out to sleep.
func TestLostSwitchOut(t *testing.T) {
	r := &recs{}
	r.add(0, 0, trace.MajorSys, trace.SysTraceOn, "", 0, 0)
	r.sw(0, 1*ms1, 0, 59, 0)
	r.add(0, 1*ms1+500_000, trace.MajorTprof, trace.TprofTick, "", 100, 59, 0x3000, 0)
	r.sw(0, 10*ms1, 0, 15, 0)
	r.sw(0, 11*ms1, 15, 0, trace.StateSleeping)
	r.sw(0, 15*ms1, 0, 59, 0)
	r.sw(0, 16*ms1, 59, 0, trace.StateSleeping)
	r.add(0, 20*ms1, trace.MajorSys, trace.SysTraceOff, "")
	a := run(r)
	if a.LostSwitchOuts != 1 {
		t.Errorf("%d lost switch-outs, want 1", a.LostSwitchOuts)
	}
	var run uint64
	for _, th := range a.Threads() {
		run += th.Time[Running]
		if th.TID != 59 {
			continue
		}
		// running: 1 to 1.5 ms and 15 to 16 ms; unknown: the trace's
		// start to 1 ms and its last tick to 15 ms; sleeping from 16 ms
		want := [NStates]uint64{Running: 1500 * 1000, Unknown: 1*ms1 + 13500*1000, Sleeping: 4 * ms1}
		if th.Time != want {
			t.Errorf("thread 59: %v, want %v", th.Time, want)
		}
	}
	if run > 20*ms1 {
		t.Errorf("the threads ran %d ns on one CPU in 20 ms", run)
	}
}

// Each thread's cells of the wall-clock profile add up to its life, and
// its states too, whatever the records: switches of threads the CPU
// does not run, switch-outs of unknown state (a thread the kernel hides
// from perf), lost switch-ins and switch-outs, wake-ups, new threads,
// ticks, interrupts, and a Begin (a wrap-mode trace) or not.
func TestWallAddsUpAnyRecords(t *testing.T) {
	for seed := int64(0); seed < 1000; seed++ {
		rng := rand.New(rand.NewSource(seed))
		r := &recs{}
		tm := uint64(1000)
		r.add(0, tm, trace.MajorSys, trace.SysTraceOn, "", 0, 0)
		tids := []uint32{101, 102, 103, 104, 105}
		for i := 0; i < 300; i++ {
			tm += uint64(rng.Intn(3)) * 1000
			cpu := rng.Intn(2)
			tid := tids[rng.Intn(len(tids))]
			switch k := rng.Intn(8); k {
			case 0, 1, 2:
				prev := uint32(0)
				if rng.Intn(4) > 0 {
					prev = tids[rng.Intn(len(tids))]
				}
				next := uint32(0)
				if rng.Intn(4) > 0 {
					next = tid
				}
				st := []uint64{0, 1, 2, 0x10, 0x80000000, 0x100}[rng.Intn(6)]
				r.sw(cpu, tm, prev, next, st)
				if rng.Intn(2) == 0 && st&0xff != 0 {
					r.stack(cpu, tm, prev, 1, 0x1000, 0x2008)
				}
			case 3:
				r.wake(cpu, tm, tid)
			case 4:
				r.add(cpu, tm, trace.MajorTprof, trace.TprofTick, "", 100, uint64(tid), 0x3000, 0)
			case 5:
				r.add(0, tm, trace.MajorMTE, trace.MTEFork, "", 100, 100, 100, uint64(tid), 1)
			case 6:
				r.add(cpu, tm, trace.MajorInterrupt, trace.IntrHard, "", 1)
			case 7:
				r.add(cpu, tm, trace.MajorInterrupt, trace.IntrHard|trace.ExitBit, "", 1)
			}
		}
		a := New(names)
		if seed%2 == 1 {
			a.Begin = 1000 + uint64(rng.Intn(100))*1000
		}
		for i := range r.all {
			a.Record(&r.all[i])
		}
		a.Finish(0)
		sum := map[*Thread]uint64{}
		for _, c := range a.Wall() {
			sum[c.Thread] += c.Ns
		}
		for _, th := range a.Threads() {
			var s uint64
			for _, v := range th.Time {
				s += v
			}
			if s != th.Lifetime() || th.End < th.Start {
				t.Fatalf("seed %d: thread %d states %v add to %d, life %d (%d-%d)", seed, th.TID, th.Time, s, th.Lifetime(), th.Start, th.End)
			}
			if sum[th] != th.Lifetime() {
				t.Fatalf("seed %d: thread %d wall cells %d, life %d, states %v", seed, th.TID, sum[th], th.Lifetime(), th.Time)
			}
		}
		var run uint64
		for _, th := range a.Threads() {
			run += th.Time[Running]
		}
		if start, end := a.Span(); run > 2*(end-start) {
			t.Fatalf("seed %d: the threads ran %d ns on 2 CPUs in %d", seed, run, end-start)
		}
	}
}

// A thread switched out in an unknown state (from the next thread's
// switch-in alone) and then switched out again with no switch-in
// between: its time between the two is unknown in its states and in the
// wall-clock profile's cells, which add up to its life.
func TestUnreportedTwice(t *testing.T) {
	r := &recs{}
	r.add(0, 0, trace.MajorSys, trace.SysTraceOn, "", 0, 0)
	r.sw(0, 1*ms1, 0, 102, 0)
	r.sw(0, 3*ms1, 102, 0, trace.StateUnknown)
	r.sw(1, 5*ms1, 102, 0, trace.StateSleeping)
	r.wake(1, 7*ms1, 102)
	r.sw(1, 8*ms1, 0, 102, 0)
	r.add(0, 10*ms1, trace.MajorSys, trace.SysTraceOff, "")
	a := run(r)
	cells := map[State]uint64{}
	for _, c := range a.Wall() {
		cells[c.State] += c.Ns
	}
	want := map[State]uint64{Unknown: 3 * ms1, Running: 4 * ms1, Sleeping: 2 * ms1, RunQueue: 1 * ms1}
	if len(cells) != len(want) {
		t.Errorf("wall-clock cells of 102 by state: %v, want %v", cells, want)
	}
	for s, ns := range want {
		if cells[s] != ns || a.threads[102].Time[s] != ns {
			t.Errorf("%s: %d ns in the wall-clock cells, %d in the states, want %d", s, cells[s], a.threads[102].Time[s], ns)
		}
	}
}

// A normal-mode trace stops when a buffer fills (BUFFER_FULL); the other
// CPUs' records go on until they see it. The threads are accounted up to
// the BUFFER_FULL, not to the last record of the others: 101 runs on
// CPU 0 from 1 ms, whose buffer fills at 5 ms; CPU 1 records on to 8 ms.
func TestBufferFullEnds(t *testing.T) {
	r := &recs{}
	r.add(0, 0, trace.MajorSys, trace.SysTraceOn, "", 0, 0)
	r.sw(0, 1*ms1, 0, 101, 0)
	r.sw(1, 1*ms1, 0, 102, 0)
	r.add(0, 5*ms1, trace.MajorSys, trace.SysBufFull, "", 0)
	r.sw(1, 7*ms1, 102, 0, trace.StateSleeping)
	r.wake(1, 8*ms1, 101)
	a := run(r)
	for _, th := range a.Threads() {
		if th.End != 5*ms1 || th.Time[Running] != 4*ms1 {
			t.Errorf("thread %d: ends at %d, %v; want 4 ms running to 5 ms", th.TID, th.End, th.Time)
		}
	}
	if start, end := a.Span(); start != 0 || end != 5*ms1 {
		t.Errorf("span %d-%d, want 0-5 ms", start, end)
	}
}

// A thread first seen switched out on a CPU whose last switch was to
// another thread (its switch-in lost) did not run since the trace's
// start: its time up to the switch-out is unknown. 101 runs on CPU 0
// from 1 to 2 ms; 105's switch-in at 3 ms is lost, it sleeps from 4 ms.
func TestFirstSeenSwitchedOut(t *testing.T) {
	r := &recs{}
	r.add(0, 0, trace.MajorSys, trace.SysTraceOn, "", 0, 0)
	r.sw(0, 1*ms1, 0, 101, 0)
	r.sw(0, 2*ms1, 101, 0, trace.StateSleeping)
	r.sw(0, 4*ms1, 105, 0, trace.StateSleeping)
	r.add(0, 10*ms1, trace.MajorSys, trace.SysTraceOff, "")
	a := run(r)
	want := [NStates]uint64{Unknown: 4 * ms1, Sleeping: 6 * ms1}
	if got := a.threads[105].Time; got != want {
		t.Errorf("thread 105: %v, want %v", got, want)
	}
	if a.LostSwitchIns != 1 {
		t.Errorf("%d lost switch-ins, want 1", a.LostSwitchIns)
	}
}
