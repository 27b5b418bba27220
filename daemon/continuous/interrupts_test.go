package continuous

import (
	"bufio"
	"bytes"
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

// TestInterruptsChargedToThreads: a handler's time goes to the thread
// last switched in on its CPU, less the time of the handlers that
// interrupted it; the idle task's, those before the CPU's first switch
// and those whose entry was not seen go to no one; handlers of one thread
// in a row on a CPU make one event; the profile has one sample per
// (thread, handler) whose one frame names the handler.
func TestInterruptsChargedToThreads(t *testing.T) {
	const pid = 4190001
	s := newSink(64)
	s.intr, s.noWaits = newIntrTracker(), true
	a := newAggregator(Limits{}, false, false, 0)
	sw := func(cpu int, tt uint64, next uint32) {
		np := uint64(0)
		if next != 0 {
			np = pid
		}
		s.Trace(cpu, trace.MajorDispatch, trace.DispatchSwitch, tt, []uint64{0, 0, np, uint64(next), 0})
	}
	irq := func(cpu int, tt uint64, minor, vec uint32) {
		s.Trace(cpu, trace.MajorInterrupt, minor, tt, []uint64{uint64(vec)})
	}
	const netRX, timer = 3, 1
	irq(0, 10, trace.IntrSoft, timer) // before CPU 0's first switch
	irq(0, 20, trace.IntrSoft|trace.ExitBit, timer)
	sw(0, 30, pid+1)
	irq(0, 100, trace.IntrSoft, netRX)
	irq(0, 110, trace.IntrHard, 24) // a hard interrupt inside the softirq
	irq(0, 115, trace.IntrHard|trace.ExitBit, 24)
	irq(0, 130, trace.IntrSoft|trace.ExitBit, netRX) // 25 of its own
	irq(0, 140, trace.IntrSoft, netRX)
	irq(0, 150, trace.IntrSoft|trace.ExitBit, netRX) // 10 more: the same event
	sw(0, 160, 0)                                    // the idle task
	irq(0, 200, trace.IntrHard, 24)
	irq(0, 210, trace.IntrHard|trace.ExitBit, 24)
	sw(1, 300, pid+2)
	irq(1, 310, trace.IntrSoft|trace.ExitBit, timer) // its entry not seen
	irq(1, 320, trace.IntrSoft, timer)
	irq(1, 327, trace.IntrSoft|trace.ExitBit, timer)
	evs := drainSink(s)
	var intr []sunk
	for _, e := range evs {
		switch e.kind {
		case evIntr:
			intr = append(intr, e)
		case evSwitch:
			t.Errorf("a switch queued for the aggregator without off-CPU time: %+v", e)
		}
	}
	if len(intr) != 3 {
		t.Fatalf("%d interrupt events, want 3 (NET_RX twice in a row made one): %+v", len(intr), intr)
	}
	for _, e := range evs {
		a.handle(&e.event, e.pcs)
	}
	iv := a.rotate(1)
	got := map[string]int64{}
	for _, sc := range iv.intrOrder {
		if len(sc.locs) != 1 {
			t.Fatalf("interrupt sample with %d frames, want 1", len(sc.locs))
		}
		got[fmt.Sprintf("%d %s", sc.tid, iv.locs[sc.locs[0]].fn.symbol)] += sc.count
	}
	want := map[string]int64{
		fmt.Sprintf("%d softirq NET_RX", pid+1):                   35,
		fmt.Sprintf("%d %s", pid+1, intrName(trace.IntrHard, 24)): 5,
		fmt.Sprintf("%d softirq TIMER", pid+2):                    7,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) || iv.intrNS != 47 {
		t.Errorf("interrupt time by thread and handler %v (%d ns in all), want %v (47)", got, iv.intrNS, want)
	}
	names := make([]frameName, len(iv.locs))
	for i, l := range iv.locs {
		names[i] = l.fn
	}
	b := builder{res: a.res, host: "h", periodNS: 1}
	p, _ := b.build(iv, names, 2)
	sum := otlptest.SummarizeType([]pprofile.Profiles{p}, "interrupt", byPID(pid))
	if sum.Total != 47 || sum.Leaf["softirq NET_RX"] != 35 || sum.Profiles != 1 {
		t.Errorf("interrupt profile: %d ns in %d profiles, NET_RX %d: want 47 in 1, 35", sum.Total, sum.Profiles, sum.Leaf["softirq NET_RX"])
	}
}

// TestInterruptsBesidePerf: a program whose sends over the loopback device
// run the NET_RX softirq on its own CPU time is charged that softirq's
// time, as perf record of the same tracepoints (which names the task each
// ran in) adds it up for it in the same run, less the hard interrupts'
// handlers inside it (the agent charges those to the hard interrupt),
// within 3 % and a probe's cost a softirq.
func TestInterruptsBesidePerf(t *testing.T) {
	needRoot(t)
	perf, err := exec.LookPath("perf")
	if err != nil {
		testenv.Missing(t, "perf is not installed: apt-get install linux-perf")
	}
	dir := t.TempDir()
	flood := filepath.Join(dir, "udpflood")
	if out, err := exec.Command("gcc", "-O2", "-o", flood, filepath.Join("testdata", "udpflood", "udpflood.c")).CombinedOutput(); err != nil {
		t.Fatalf("build udpflood: %v\n%s", err, out)
	}
	rcv := otlptest.Start(t)
	// 30,000 sends: some 60,000 softirq records on the flood's CPU, which
	// its ring holds even if the agent gets no CPU to read it meanwhile.
	stop := runAgent(t, Config{RateHz: 97, Interval: time.Second, Interrupts: true,
		Export: otlpexport.Config{Protocol: "http", Endpoint: rcv.HTTPURL}})
	data := filepath.Join(dir, "perf.data")
	out, err := exec.Command(perf, "record", "-q", "-m", "16M", "-o", data, "-a",
		"-e", "irq:softirq_entry", "-e", "irq:softirq_exit", "-e", "irq:irq_handler_entry", "-e", "irq:irq_handler_exit",
		"--", flood, "30000").Output()
	if err != nil {
		t.Fatalf("perf record -- udpflood: %v", err)
	}
	var pid int
	if _, err := fmt.Sscanf(string(out), "pid %d", &pid); err != nil {
		t.Fatalf("udpflood printed %q", out)
	}
	st := stop()
	if st.EventsDropped != 0 || st.Lost != 0 || st.TotalInterrupt == 0 {
		t.Fatalf("agent: %d records dropped, %d lost, %v in interrupts", st.EventsDropped, st.Lost, st.TotalInterrupt)
	}
	perfNS, pairs := perfSoftirqNS(t, perf, data, pid, 3)
	got := rcv.WaitFor(t, 60*time.Second, fmt.Sprintf("the %v of interrupt time sent", st.TotalInterrupt), func(ps []pprofile.Profiles) bool {
		return otlptest.SummarizeType(ps, "interrupt", func(pcommon.Map) bool { return true }).Total >= int64(st.TotalInterrupt)
	})
	s := otlptest.SummarizeType(got, "interrupt", byPID(pid))
	ours := s.Leaf["softirq NET_RX"]
	t.Logf("udpflood (pid %d): NET_RX %.2f ms by the agent, %.2f ms by perf in %d softirqs (%.0f ns apart each); its interrupt profile: %v",
		pid, float64(ours)/1e6, float64(perfNS)/1e6, pairs, float64(perfNS-ours)/float64(max(pairs, 1)), s.Leaf)
	if perfNS < 5e6 {
		t.Fatalf("perf counted %.2f ms of NET_RX in udpflood: want at least 5 ms to compare", float64(perfNS)/1e6)
	}
	// Both tools stamp the same tracepoints, one probe after the other: a
	// softirq's interval by one holds the other's work at one end and not
	// at the other, the same small time for every softirq (the log gives
	// it). A thread charged another's softirqs, or events missed or
	// counted twice, are tens of percent.
	const probeNS = 150
	if d, lim := math.Abs(float64(ours-perfNS)), 0.03*float64(perfNS)+probeNS*float64(pairs); d > lim {
		t.Errorf("NET_RX charged to udpflood: %.2f ms by the agent, %.2f ms by perf in %d softirqs: %.2f ms apart, want within 3 %% and %d ns a softirq (%.2f ms)",
			float64(ours)/1e6, float64(perfNS)/1e6, pairs, d/1e6, probeNS, lim/1e6)
	}
	if r := s.Resources; len(r) == 0 || r[0]["process.executable.name"] != "udpflood" {
		t.Errorf("resources of udpflood's interrupt profile: %v", r)
	}
}

// perfSoftirqNS adds up, from perf's record of the softirq and irq handler
// tracepoints, the time of softirq vec that ran in process pid's tasks
// (entry to exit on each CPU) less the hard interrupts' handlers inside
// it, which the agent charges to the hard interrupt.
func perfSoftirqNS(t *testing.T, perf, data string, pid, vec int) (total int64, pairs int) {
	t.Helper()
	out, err := exec.Command(perf, "script", "-i", data, "--ns", "-F", "pid,cpu,time,event,trace").Output()
	if err != nil {
		t.Fatalf("perf script: %v", err)
	}
	start := map[string]int64{}  // a softirq vec running on a CPU: its entry
	hard := map[string]int64{}   // a handler inside it: its entry
	nested := map[string]int64{} // the handlers' time inside it so far
	want := "vec=" + strconv.Itoa(vec)
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		// "  1234 [001] 44565.918586207: irq:softirq_entry: vec=3 [action=NET_RX]"
		// "  1234 [001] 44565.918586900: irq:irq_handler_entry: irq=24 name=virtio0"
		f := strings.Fields(sc.Text())
		if len(f) < 5 {
			continue
		}
		p, err1 := strconv.Atoi(f[0])
		sec, frac, _ := strings.Cut(strings.TrimSuffix(f[2], ":"), ".")
		s, err2 := strconv.ParseInt(sec, 10, 64)
		ns, err3 := strconv.ParseInt(frac, 10, 64)
		if err1 != nil || err2 != nil || err3 != nil || len(frac) != 9 {
			continue
		}
		at, cpu := s*1e9+ns, f[1]
		_, in := start[cpu]
		switch {
		case f[3] == "irq:softirq_entry:" && f[4] == want:
			start[cpu], nested[cpu] = at, 0
		case f[3] == "irq:softirq_exit:" && f[4] == want:
			if in && p == pid {
				total += at - start[cpu] - nested[cpu]
				pairs++
			}
			delete(start, cpu)
			delete(hard, cpu)
		case f[3] == "irq:irq_handler_entry:" && in:
			hard[cpu] = at
		case f[3] == "irq:irq_handler_exit:" && in:
			if b, ok := hard[cpu]; ok {
				nested[cpu] += at - b
			}
			delete(hard, cpu)
		}
	}
	return total, pairs
}
