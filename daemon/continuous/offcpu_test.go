package continuous

import (
	"fmt"
	"math"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"perfinsp/daemon/otlpexport"
	"perfinsp/daemon/otlpexport/otlptest"
	"perfinsp/format/trace"
	"perfinsp/internal/testenv"
)

func buildSleeper(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "sleeper")
	if out, err := exec.Command("gcc", "-O2", "-g", "-fno-omit-frame-pointer", "-pthread", "-o", bin,
		filepath.Join("testdata", "sleeper", "sleeper.c")).CombinedOutput(); err != nil {
		t.Fatalf("build sleeper: %v\n%s", err, out)
	}
	return bin
}

// TestOffCPUThroughCollector: with OffCPU, a thread that sleeps 100 ms
// ten times in nanosleep (through the C library: its user stack unwound
// by call-frame information) has that time, within 5 %, in the off-CPU
// profile under its function sleep_timed, as the real Collector forwards
// it; the samples of the off-CPU profile name the thread, and the CPU
// profiles still hold every sample sent.
func TestOffCPUThroughCollector(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	col := buildCollector(t, dir)
	sleeper := buildSleeper(t, dir)
	// Records the kernel lost (a ring full while the machine starved the
	// agent, which says how many) leave waits without an end or a
	// beginning: such a run's figures are not judged, and it runs again.
	testenv.Retry(t, 3, "off-CPU time beside a ring that lost records", func(a *testenv.Attempt) {
		offCPUThroughCollector(t, a, col, sleeper)
	})
}

func offCPUThroughCollector(t *testing.T, a *testenv.Attempt, col, sleeper string) {
	rcv := otlptest.Start(t)
	endpoint := startCollector(t, col, rcv)
	stop := runAgent(t, Config{RateHz: 97, Interval: time.Second, OffCPU: true, DWARF: true,
		Export: otlpexport.Config{Protocol: "http", Endpoint: endpoint}})
	cmd := exec.Command(sleeper, "10")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("sleeper: %v", err)
	}
	pid := cmd.Process.Pid
	f := strings.Fields(string(out))
	if len(f) != 2 || f[0] != "slept_ns" {
		t.Fatalf("sleeper printed %q", out)
	}
	slept, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil || slept < 1e9 {
		t.Fatalf("sleeper printed %q: want at least 1 s slept", out)
	}
	st := stop()
	if st.Export.Dropped != 0 || st.TotalOffCPU == 0 {
		t.Fatalf("export %+v, %v off-CPU", st.Export, st.TotalOffCPU)
	}
	all := func(pcommon.Map) bool { return true }
	// The collector forwards on its own schedule: wait for all of it.
	got := rcv.WaitFor(t, 60*time.Second, fmt.Sprintf("the %v off-CPU and %d samples sent, forwarded", st.TotalOffCPU, st.Export.SentSamples), func(ps []pprofile.Profiles) bool {
		return otlptest.SummarizeType(ps, "off_cpu", all).Total >= int64(st.TotalOffCPU) &&
			otlptest.Summarize(ps, all).Total >= int64(st.Export.SentSamples)
	})
	if n := otlptest.SummarizeType(got, "off_cpu", all).Total; n != int64(st.TotalOffCPU) {
		t.Errorf("%d ns off-CPU forwarded by the collector, %d sent to it", n, int64(st.TotalOffCPU))
	}
	if n := otlptest.Summarize(got, all).Total; n != int64(st.Export.SentSamples) {
		t.Errorf("%d samples forwarded by the collector, %d sent to it", n, st.Export.SentSamples)
	}
	s := otlptest.SummarizeType(got, "off_cpu", byPID(pid))
	if s.Profiles == 0 {
		t.Fatalf("no off-CPU profile of the sleeper (pid %d) in %d requests", pid, len(got))
	}
	under := s.Inclusive["sleep_timed"]
	t.Logf("sleeper (pid %d): slept %.1f ms by its clock; off-CPU %.1f ms under sleep_timed, %.1f ms in all (threads %v); agent: %v off-CPU in all, %d waits without a stack",
		pid, float64(slept)/1e6, float64(under)/1e6, float64(s.Total)/1e6, s.Threads, st.TotalOffCPU, st.UnstackedWaits)
	if d := 100 * math.Abs(float64(under-slept)) / float64(slept); d > 5 {
		fail := t.Errorf
		if st.Lost > 0 {
			fail = a.Errorf
		}
		fail("off-CPU under sleep_timed %.1f ms, the program slept %.1f ms: %.1f %% apart, want within 5 %% (%d records lost by the kernel)", float64(under)/1e6, float64(slept)/1e6, d, st.Lost)
	}
	// sleep_timed's stacks are the sleeper thread's, through nanosleep.
	for i, stack := range s.Stacks {
		if !contains(stack, "sleep_timed") {
			continue
		}
		if !contains(stack, "run") || !contains(stack, "start_thread") && !contains(stack, "clone3") {
			t.Errorf("off-CPU stack %d under sleep_timed is cut: %v", i, stack)
		}
	}
	names := map[string]bool{}
	for _, n := range s.Threads {
		names[n] = true
	}
	if !names["sleeper"] {
		t.Errorf("thread names of the off-CPU samples %v: want sleeper", s.Threads)
	}
	r := s.Resources[0]
	if r["process.executable.name"] != "sleeper" || r["process.pid"] != int64(pid) {
		t.Errorf("resource of the off-CPU profile: %v", r)
	}
}

func contains(stack []string, fn string) bool {
	for _, s := range stack {
		if s == fn {
			return true
		}
	}
	return false
}

// TestOffCPUWaits: a wait counts from its switch-out to its switch-in
// under the stack that came with the switch-out, split at the end of an
// interval; a switch-out while still runnable, a wait without its stack
// and the wait of a thread that exited count nothing.
func TestOffCPUWaits(t *testing.T) {
	const pid, kpc = 4190001, 0xffffffff81000010
	s := newSink(64)
	a := newAggregator(Limits{}, false, true, 0)
	apply := func() {
		for _, e := range drainSink(s) {
			a.handle(&e.event, e.pcs)
		}
	}
	sw := func(cpu int, t, prev, next, state uint64) {
		pp, np := uint64(0), uint64(0)
		if prev != 0 {
			pp = pid
		}
		if next != 0 {
			np = pid
		}
		s.Trace(cpu, trace.MajorDispatch, trace.DispatchSwitch, t, []uint64{pp, prev, np, next, state})
	}
	sw(0, 100, pid+1, 0, trace.StateSleeping)
	s.SwitchStack(0, 100, pid, pid+1, []uint64{kpc}, 1, false, false)
	sw(1, 110, pid+2, 0, 0) // preempted, to the idle task: nothing to apply
	if got := drainSink(s); len(got) != 2 {
		t.Fatalf("%d events queued, want the wait's switch and its stack: %+v", len(got), got)
	} else {
		for _, e := range got {
			a.handle(&e.event, e.pcs)
		}
	}
	a.endWaits(150)
	iv := a.rotate(1)
	if iv.offNS != 50 || len(iv.offOrder) != 1 || iv.offOrder[0].tid != pid+1 || iv.offOrder[0].count != 50 || len(iv.offOrder[0].locs) != 1 {
		t.Fatalf("first interval: %d ns off-CPU in %d stacks, want 50 ns of thread %d with its one frame", iv.offNS, len(iv.offOrder), pid+1)
	}
	sw(1, 180, pid+2, pid+1, 0) // switched in: the wait ends
	sw(0, 200, pid+2, pid+1, 0) // in again, no wait under way
	// A wait whose stack did not come; the wait of a thread that exits.
	sw(0, 300, pid+3, 0, trace.StateBlocked)
	sw(1, 400, 0, pid+3, 0)
	sw(0, 500, pid+4, 0, trace.StateSleeping)
	s.SwitchStack(0, 500, pid, pid+4, []uint64{kpc}, 1, false, false)
	s.MTE(0, trace.MTEExit, 550, []uint64{pid, pid + 4}, "")
	sw(1, 600, 0, pid+4, 0)
	apply()
	a.endWaits(1000)
	iv = a.rotate(2)
	if iv.offNS != 30 || len(iv.offOrder) != 1 || iv.offOrder[0].count != 30 {
		t.Errorf("second interval: %d ns off-CPU in %d stacks, want the 30 ns left of the first wait alone", iv.offNS, len(iv.offOrder))
	}
	if a.off.unstacked != 1 {
		t.Errorf("%d waits without a stack, want 1", a.off.unstacked)
	}
}

// TestOffCPULateRecords: records of one CPU applied after later records of
// another (a CPU's records held behind a stack whose table loads) count no
// time the thread did not wait: a switch-out applied after the thread's
// exit begins no wait, a switch-in stamped before the wait under way ends
// nothing, and a tid used again after an exit waits as a new thread.
func TestOffCPULateRecords(t *testing.T) {
	const pid, kpc = 4190001, 0xffffffff81000010
	s := newSink(64)
	a := newAggregator(Limits{}, false, true, 0)
	apply := func() {
		for _, e := range drainSink(s) {
			a.handle(&e.event, e.pcs)
		}
	}
	out := func(cpu int, t, tid uint64) {
		s.Trace(cpu, trace.MajorDispatch, trace.DispatchSwitch, t, []uint64{pid, tid, 0, 0, trace.StateSleeping})
		s.SwitchStack(cpu, t, pid, uint32(tid), []uint64{kpc}, 1, false, false)
	}
	in := func(cpu int, t, tid uint64) {
		s.Trace(cpu, trace.MajorDispatch, trace.DispatchSwitch, t, []uint64{0, 0, pid, tid, 0})
	}
	// Thread pid+1 waits 100-200, then exits at 250; CPU 0's records
	// come after CPU 1's.
	in(1, 200, pid+1)
	s.MTE(1, trace.MTEExit, 250, []uint64{pid, pid + 1}, "")
	out(0, 100, pid+1)
	// Thread pid+2 waits 300-400 (in order), then a late switch-in of
	// an earlier wait (stamped 290) comes while its next wait (from 500)
	// is under way; that wait ends at 600.
	out(0, 300, pid+2)
	in(1, 400, pid+2)
	out(0, 500, pid+2)
	in(1, 290, pid+2)
	in(1, 600, pid+2)
	// Thread pid+3 exits at 160; its switch-out of 120 comes after, and
	// its tid is not used again: nothing would end that wait.
	in(1, 150, pid+3)
	s.MTE(1, trace.MTEExit, 160, []uint64{pid, pid + 3}, "")
	out(0, 120, pid+3)
	// pid+1's tid again, another thread's, after the exit: 700-750.
	out(0, 700, pid+1)
	in(1, 750, pid+1)
	apply()
	a.endWaits(10_000)
	iv := a.rotate(1)
	byTID := map[uint32]int64{}
	for _, sc := range iv.offOrder {
		byTID[sc.tid] += sc.count
	}
	if byTID[pid+1] != 50 || byTID[pid+2] != 200 || byTID[pid+3] != 0 || iv.offNS != 250 {
		t.Errorf("off-CPU by thread %v (%d ns in all): want %d: 50 (the exited thread's late wait uncounted, its tid's new thread's 50), %d: 200, %d: none", byTID, iv.offNS, pid+1, pid+2, pid+3)
	}
	// The exit is remembered for a while, then forgotten.
	if w := a.off.waits[pid+1]; w == nil || w.exited != 0 {
		t.Errorf("tid %d after its reuse: %+v, want a live thread's wait", pid+1, w)
	}
	s.MTE(1, trace.MTEExit, 800, []uint64{pid, pid + 2}, "")
	apply()
	a.endWaits(800 + exitedKept + 1)
	if w := a.off.waits[pid+2]; w != nil {
		t.Errorf("exited tid %d still followed %d ns after its exit", pid+2, exitedKept+1)
	}
}
