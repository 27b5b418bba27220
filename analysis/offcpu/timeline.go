package offcpu

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"sort"
)

// WriteTimeline writes the threads' time lines (KeepSpans) as Chrome
// trace-event JSON, which the Perfetto UI (ui.perfetto.dev) and
// chrome://tracing open: one track per thread, grouped by process, a slice
// per stretch in a state other than unknown (µs from the trace's start),
// and the interrupts of each CPU on a track of their own. keep selects
// the threads (nil: all).
func (a *Analyzer) WriteTimeline(out io.Writer, procName func(pid uint32) string, keep func(*Thread) bool) error {
	w := bufio.NewWriter(out)
	us := func(t uint64) float64 { return float64(t-a.start) / 1e3 }
	first := true
	emit := func(v any) {
		b, _ := json.Marshal(v)
		if !first {
			w.WriteString(",\n")
		}
		first = false
		w.Write(b)
	}
	w.WriteString(`{"displayTimeUnit":"ns","traceEvents":[` + "\n")
	named := map[uint32]bool{}
	threads := map[*Thread]bool{}
	for _, sp := range a.spans {
		th := sp.Thread
		if keep != nil && !keep(th) {
			continue
		}
		if !threads[th] {
			threads[th] = true
			if !named[th.PID] {
				named[th.PID] = true
				emit(map[string]any{"ph": "M", "name": "process_name", "pid": th.PID, "tid": th.PID, "args": map[string]string{"name": fmt.Sprintf("%s %d", procName(th.PID), th.PID)}})
			}
			emit(map[string]any{"ph": "M", "name": "thread_name", "pid": th.PID, "tid": th.TID, "args": map[string]string{"name": fmt.Sprintf("%s %d", th.Name, th.TID)}})
		}
		if sp.State == Unknown {
			continue
		}
		emit(map[string]any{"ph": "X", "name": sp.State.String(), "cat": "sched", "pid": th.PID, "tid": th.TID, "ts": us(sp.Start), "dur": float64(sp.End-sp.Start) / 1e3})
	}
	cpus := make([]int, 0, len(a.intrSpans))
	for c := range a.intrSpans {
		cpus = append(cpus, c)
	}
	sort.Ints(cpus)
	const intrPid = 1 << 31 // a track group of its own, no process's
	if len(cpus) > 0 {
		emit(map[string]any{"ph": "M", "name": "process_name", "pid": intrPid, "tid": 0, "args": map[string]string{"name": "interrupts"}})
	}
	for _, c := range cpus {
		emit(map[string]any{"ph": "M", "name": "thread_name", "pid": intrPid, "tid": c, "args": map[string]string{"name": fmt.Sprintf("CPU %d", c)}})
		for _, sp := range a.intrSpans[c] {
			name := "irq"
			if sp.soft {
				name = "softirq"
			}
			emit(map[string]any{"ph": "X", "name": name, "cat": "interrupt", "pid": intrPid, "tid": c, "ts": us(sp.start), "dur": float64(sp.end-sp.start) / 1e3})
		}
	}
	w.WriteString("\n]}\n")
	return w.Flush()
}

type intrSpan struct {
	start, end uint64
	soft       bool
}
