package offcpu

import (
	"fmt"
	"io"
	"sort"

	"perfinsp/format/traceevent"
)

// WriteTimeline writes the threads' time lines (KeepSpans) as Chrome
// trace-event JSON, which the Perfetto UI (ui.perfetto.dev) and
// chrome://tracing open (EmitTimeline, µs from the trace's start). keep
// selects the threads (nil: all).
func (a *Analyzer) WriteTimeline(out io.Writer, procName func(pid uint32) string, keep func(*Thread) bool) error {
	w := traceevent.New(out, a.start)
	a.EmitTimeline(w, procName, keep, nil)
	return w.Close()
}

// EmitTimeline writes the threads' time lines (KeepSpans) to w: one track
// per thread, grouped by process, a slice per stretch in a state other
// than unknown, and the interrupts of each CPU on a track of their own.
// named holds the processes and threads already named in w (pid, and
// pid<<32|tid), and gets those named here (nil: none).
func (a *Analyzer) EmitTimeline(w *traceevent.Writer, procName func(pid uint32) string, keep func(*Thread) bool, named map[uint64]bool) {
	if named == nil {
		named = map[uint64]bool{}
	}
	for _, sp := range a.spans {
		th := sp.Thread
		if keep != nil && !keep(th) {
			continue
		}
		if !named[uint64(th.PID)] {
			named[uint64(th.PID)] = true
			w.ProcessName(th.PID, fmt.Sprintf("%s %d", procName(th.PID), th.PID))
		}
		if k := uint64(th.PID)<<32 | uint64(th.TID); !named[k] {
			named[k] = true
			w.ThreadName(th.PID, th.TID, fmt.Sprintf("%s %d", th.Name, th.TID))
		}
		if sp.State == Unknown {
			continue
		}
		w.Complete(th.PID, th.TID, "sched", sp.State.String(), sp.Start, sp.End)
	}
	cpus := make([]int, 0, len(a.intrSpans))
	for c := range a.intrSpans {
		cpus = append(cpus, c)
	}
	sort.Ints(cpus)
	if len(cpus) > 0 {
		w.ProcessName(IntrPID, "interrupts")
	}
	for _, c := range cpus {
		w.ThreadName(IntrPID, uint32(c), fmt.Sprintf("CPU %d", c))
		for _, sp := range a.intrSpans[c] {
			name := "irq"
			if sp.soft {
				name = "softirq"
			}
			w.Complete(IntrPID, uint32(c), "interrupt", name, sp.start, sp.end)
		}
	}
}

// IntrPID is the track group of the interrupts in a time line: no
// process's.
const IntrPID = 1 << 31

type intrSpan struct {
	start, end uint64
	soft       bool
}
