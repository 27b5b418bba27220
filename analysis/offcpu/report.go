package offcpu

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"sort"
)

// MinHist is the number of wake-ups from which sched.out prints a
// thread's own histogram.
const MinHist = 10

func ms(ns uint64) float64 { return float64(ns) / 1e6 }
func us(ns uint64) float64 { return float64(ns) / 1e3 }

// sorted returns the threads by process and thread id, then start.
func (a *Analyzer) sorted() []*Thread {
	ts := append([]*Thread(nil), a.order...)
	sort.SliceStable(ts, func(i, j int) bool {
		if ts[i].PID != ts[j].PID {
			return ts[i].PID < ts[j].PID
		}
		if ts[i].TID != ts[j].TID {
			return ts[i].TID < ts[j].TID
		}
		return ts[i].Start < ts[j].Start
	})
	return ts
}

// AllWakeups are the wake-up latencies of every thread.
func (a *Analyzer) AllWakeups() *Latencies {
	var l Latencies
	for _, th := range a.order {
		l.Add(&th.Wake)
	}
	return &l
}

// WriteText writes sched.out: the per-thread table, the wake-up latency
// histograms (every thread's, then each thread's with at least MinHist
// wake-ups), the longest wake-ups, and interrupt time per CPU.
func (a *Analyzer) WriteText(out io.Writer, procName func(pid uint32) string) error {
	w := bufio.NewWriter(out)
	cfi := ""
	if a.SwitchStacksCFI > 0 {
		cfi = fmt.Sprintf(" (%d by call-frame information)", a.SwitchStacksCFI)
	}
	fmt.Fprintf(w, "sched.out: where each thread's time went, %.3f s traced; %d dispatches, %d wake-ups, %d switch stacks%s, %d ticks\n",
		float64(a.end-a.start)/1e9, a.Dispatches, a.Wakeups, a.SwitchStacks, cfi, a.Ticks)
	if a.Begin > a.start {
		fmt.Fprintf(w, "Every CPU's records from %.3f s on (the trace overwrote the older ones of some): the time before is unknown.\n", float64(a.Begin-a.start)/1e9)
	}
	fmt.Fprintln(w, "Times in ms; a thread's states add up to its LIFE in the trace. RUNQ: runnable, waiting for a CPU (woken or preempted);")
	fmt.Fprintln(w, "SLEEP: S (timers, futexes, pipes, sockets); BLOCK: D (I/O); UNKNOWN: not in the trace (before its first record, a switch lost). VOL/INVOL: switches")
	fmt.Fprintln(w, "to wait / preempted. IRQ, SOFTIRQ: interrupt time while it ran (within RUN). WAKE: wake-to-run latency in µs.")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "%7s %7s %-16s %10s %10s %9s %10s %10s %8s %9s %7s %7s %8s %8s %6s %9s %9s %9s\n",
		"PID", "TID", "NAME", "LIFE", "RUN", "RUNQ", "SLEEP", "BLOCK", "OTHER", "UNKNOWN", "VOL", "INVOL", "IRQ", "SOFTIRQ", "WAKES", "WAKE_AVG", "WAKE_P99", "WAKE_MAX")
	for _, th := range a.sorted() {
		fmt.Fprintf(w, "%7d %7d %-16s %10.3f %10.3f %9.3f %10.3f %10.3f %8.3f %9.3f %7d %7d %8.3f %8.3f %6d %9.1f %9.1f %9.1f\n",
			th.PID, th.TID, trunc(th.Name, 16), ms(th.Lifetime()), ms(th.Time[Running]), ms(th.Time[RunQueue]), ms(th.Time[Sleeping]),
			ms(th.Time[Blocked]), ms(th.Time[Other]), ms(th.Time[Unknown]), th.Voluntary, th.Involuntary, ms(th.IRQ), ms(th.SoftIRQ),
			th.Wake.Count(), th.Wake.Mean()/1e3, us(th.Wake.Percentile(0.99)), us(th.Wake.Max()))
	}
	all := a.AllWakeups()
	fmt.Fprintf(w, "\nWake-up latency, every thread: %d wake-ups, mean %.1f µs, p50 %.1f, p99 %.1f, max %.1f µs\n",
		all.Count(), all.Mean()/1e3, us(all.Percentile(0.5)), us(all.Percentile(0.99)), us(all.Max()))
	all.WriteHist(w, "")
	for _, th := range a.sorted() {
		if th.Wake.Count() < MinHist {
			continue
		}
		fmt.Fprintf(w, "\nWake-up latency of %s %d/%d (%s): %d wake-ups, mean %.1f µs, p99 %.1f, max %.1f µs\n", procName(th.PID), th.PID, th.TID, th.Name,
			th.Wake.Count(), th.Wake.Mean()/1e3, us(th.Wake.Percentile(0.99)), us(th.Wake.Max()))
		th.Wake.WriteHist(w, "")
	}
	if worst := a.Worst(); len(worst) > 0 {
		fmt.Fprintf(w, "\nLongest wake-ups (time from the trace's start, s)\n%14s %14s %5s %7s %7s %-16s %10s\n", "WOKEN", "RAN", "CPU", "PID", "TID", "NAME", "LAT(µs)")
		for _, l := range worst {
			var pid uint32
			name := ""
			if l.th != nil {
				pid, name = l.th.PID, l.th.Name
			}
			fmt.Fprintf(w, "%14.6f %14.6f %5d %7d %7d %-16s %10.1f\n", float64(l.From-a.start)/1e9, float64(l.At-a.start)/1e9, l.CPU, pid, l.TID, trunc(name, 16), us(l.Ns))
		}
	}
	if len(a.CPUIntr) > 0 {
		fmt.Fprintf(w, "\nInterrupts per CPU (nested ones out of the ones they interrupted)\n%4s %10s %8s %10s %8s %8s\n", "CPU", "IRQ(ms)", "IRQS", "SOFT(ms)", "SOFTS", "%TIME")
		cpus := make([]int, 0, len(a.CPUIntr))
		for c := range a.CPUIntr {
			cpus = append(cpus, c)
		}
		sort.Ints(cpus)
		for _, c := range cpus {
			ci := a.CPUIntr[c]
			pct := 0.0
			if a.end > a.start {
				pct = 100 * float64(ci.IRQ+ci.SoftIRQ) / float64(a.end-a.start)
			}
			fmt.Fprintf(w, "%4d %10.3f %8d %10.3f %8d %8.2f\n", c, ms(ci.IRQ), ci.IRQCount, ms(ci.SoftIRQ), ci.SoftIRQCount, pct)
		}
	}
	return w.Flush()
}

func trunc(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// jsonThread is a thread in sched.json.
type jsonThread struct {
	PID        uint32            `json:"pid"`
	TID        uint32            `json:"tid"`
	Name       string            `json:"name"`
	Process    string            `json:"process"`
	StartNs    uint64            `json:"start_ns"`
	EndNs      uint64            `json:"end_ns"`
	StateNs    map[string]uint64 `json:"state_ns"`
	Voluntary  uint64            `json:"voluntary"`
	Involunt   uint64            `json:"involuntary"`
	IRQNs      uint64            `json:"irq_ns"`
	SoftIRQNs  uint64            `json:"softirq_ns"`
	Wake       jsonLat           `json:"wakeup_latency"`
	Preempt    jsonLat           `json:"preempted_latency"`
	WakeHistUs []uint64          `json:"wakeup_hist_log2_us"`
	WakeNs     []uint64          `json:"wakeup_ns"`
	PreemptNs  []uint64          `json:"preempted_ns"`
}

type jsonLat struct {
	Count  int     `json:"count"`
	MeanNs float64 `json:"mean_ns"`
	P50Ns  uint64  `json:"p50_ns"`
	P99Ns  uint64  `json:"p99_ns"`
	MaxNs  uint64  `json:"max_ns"`
}

func latJSON(l *Latencies) jsonLat {
	return jsonLat{l.Count(), l.Mean(), l.Percentile(0.5), l.Percentile(0.99), l.Max()}
}

// WriteJSON writes sched.json: the same figures as sched.out, in ns, and
// each thread's waits to run after a wake-up and after a preemption, each
// in time order.
func (a *Analyzer) WriteJSON(out io.Writer, procName func(pid uint32) string) error {
	type cpu struct {
		CPU          int    `json:"cpu"`
		IRQNs        uint64 `json:"irq_ns"`
		IRQCount     uint64 `json:"irq_count"`
		SoftIRQNs    uint64 `json:"softirq_ns"`
		SoftIRQCount uint64 `json:"softirq_count"`
	}
	type worst struct {
		TID    uint32 `json:"tid"`
		CPU    int    `json:"cpu"`
		WokeNs uint64 `json:"woken_ns"`
		RanNs  uint64 `json:"ran_ns"`
		Ns     uint64 `json:"latency_ns"`
	}
	doc := struct {
		StartNs    uint64       `json:"start_ns"`
		BeginNs    uint64       `json:"begin_ns,omitempty"`
		EndNs      uint64       `json:"end_ns"`
		Dispatches uint64       `json:"dispatches"`
		Wakeups    uint64       `json:"wakeups"`
		Stacks     uint64       `json:"switch_stacks"`
		StacksCFI  uint64       `json:"switch_stacks_cfi"`
		Threads    []jsonThread `json:"threads"`
		All        jsonLat      `json:"wakeup_latency"`
		AllHist    []uint64     `json:"wakeup_hist_log2_us"`
		Worst      []worst      `json:"worst_wakeups"`
		CPUs       []cpu        `json:"cpus"`
	}{StartNs: a.start, BeginNs: a.Begin, EndNs: a.end, Dispatches: a.Dispatches, Wakeups: a.Wakeups, Stacks: a.SwitchStacks, StacksCFI: a.SwitchStacksCFI, Threads: []jsonThread{}, Worst: []worst{}, CPUs: []cpu{}}
	for _, th := range a.sorted() {
		st := map[string]uint64{}
		for s := State(0); s < NStates; s++ {
			st[s.String()] = th.Time[s]
		}
		doc.Threads = append(doc.Threads, jsonThread{th.PID, th.TID, th.Name, procName(th.PID), th.Start, th.End, st, th.Voluntary, th.Involuntary,
			th.IRQ, th.SoftIRQ, latJSON(&th.Wake), latJSON(&th.Preempt), th.Wake.Hist(), th.Wake.Ns, th.Preempt.Ns})
	}
	all := a.AllWakeups()
	doc.All, doc.AllHist = latJSON(all), all.Hist()
	for _, l := range a.Worst() {
		doc.Worst = append(doc.Worst, worst{l.TID, l.CPU, l.From, l.At, l.Ns})
	}
	for c, ci := range a.CPUIntr {
		doc.CPUs = append(doc.CPUs, cpu{c, ci.IRQ, ci.IRQCount, ci.SoftIRQ, ci.SoftIRQCount})
	}
	sort.Slice(doc.CPUs, func(i, j int) bool { return doc.CPUs[i].CPU < doc.CPUs[j].CPU })
	enc := json.NewEncoder(out)
	enc.SetIndent("", " ")
	return enc.Encode(doc)
}
