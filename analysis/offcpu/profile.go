package offcpu

import (
	"bufio"
	"fmt"
	"io"
	"sort"
	"strconv"

	"github.com/google/pprof/profile"

	"perfinsp/analysis/pprofloc"
)

// Cell is one row of a profile: a thread, a state, a stack (root first)
// and the ns spent there.
type Cell struct {
	Thread *Thread
	State  State
	Stack  []string
	Ns     uint64
}

// OffCPU returns the off-CPU profile: every thread's time off a CPU by the
// state it waited in and the stack it left the CPU with (empty for a
// preempted thread, whose stack is no wait's, and where callstack was off).
func (a *Analyzer) OffCPU() []Cell {
	var out []Cell
	for k, ns := range a.off {
		if ns == 0 {
			continue
		}
		out = append(out, Cell{k.th, k.state, a.stacks[k.stack], ns})
	}
	sortCells(out)
	return out
}

// Wall returns the wall-clock profile: the off-CPU profile, and each
// thread's running time shared among the stacks of its tprof ticks (in
// proportion to their ticks; one "[running]" cell for a thread without
// ticks). A thread's cells add up to its lifetime.
func (a *Analyzer) Wall() []Cell {
	out := a.OffCPU()
	for _, th := range a.order {
		run := th.Time[Running]
		if run == 0 {
			continue
		}
		if th.tickTotal == 0 {
			out = append(out, Cell{th, Running, []string{"[running]"}, run})
			continue
		}
		ids := make([]int32, 0, len(th.ticks))
		for id := range th.ticks {
			ids = append(ids, id)
		}
		sort.Slice(ids, func(i, j int) bool {
			return th.ticks[ids[i]] > th.ticks[ids[j]] || th.ticks[ids[i]] == th.ticks[ids[j]] && ids[i] < ids[j]
		})
		var given uint64
		first := len(out)
		for _, id := range ids {
			ns := run / th.tickTotal * th.ticks[id]
			ns += run % th.tickTotal * th.ticks[id] / th.tickTotal
			given += ns
			out = append(out, Cell{th, Running, a.stacks[id], ns})
		}
		out[first].Ns += run - given // rounding, to the most ticked
	}
	sortCells(out)
	return out
}

func sortCells(c []Cell) {
	sort.Slice(c, func(i, j int) bool {
		if c[i].Ns != c[j].Ns {
			return c[i].Ns > c[j].Ns
		}
		if c[i].Thread.TID != c[j].Thread.TID {
			return c[i].Thread.TID < c[j].Thread.TID
		}
		if c[i].Thread.Start != c[j].Thread.Start {
			return c[i].Thread.Start < c[j].Thread.Start // an id used again
		}
		if c[i].State != c[j].State {
			return c[i].State < c[j].State
		}
		return fmt.Sprint(c[i].Stack) < fmt.Sprint(c[j].Stack)
	})
}

// frames are a cell's folded frames: process, thread, state, the stack.
func (c Cell) frames(procName func(pid uint32) string) []string {
	th := c.Thread
	name := th.Name
	if name == "" {
		name = "?"
	}
	f := []string{procName(th.PID), name + "-" + strconv.Itoa(int(th.TID)), "[" + c.State.String() + "]"}
	return append(f, c.Stack...)
}

// WriteFolded writes cells as folded stacks, in ns (flamegraph.pl
// --countname=ns): process;thread-tid;[state];root;...;leaf ns.
func WriteFolded(w io.Writer, cells []Cell, procName func(pid uint32) string) error {
	bw := bufio.NewWriter(w)
	for _, c := range cells {
		for i, f := range c.frames(procName) {
			if i > 0 {
				bw.WriteByte(';')
			}
			bw.WriteString(foldedName(f))
		}
		fmt.Fprintf(bw, " %d\n", c.Ns)
	}
	return bw.Flush()
}

// foldedName keeps a frame one field of a folded line.
func foldedName(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c == ';' || c == ' ' || c == '\n' {
			b[i] = '_'
		}
	}
	return string(b)
}

// WritePprof writes cells as a pprof profile of one sample type (kind,
// "nanoseconds"): the leaf first, then the state, thread and process as
// the outermost frames, and labels pid, tid, state.
func WritePprof(w io.Writer, cells []Cell, kind string, procName func(pid uint32) string) error {
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: kind, Unit: "nanoseconds"}},
		PeriodType: &profile.ValueType{Type: kind, Unit: "nanoseconds"},
		Period:     1,
	}
	locs := pprofloc.New(p)
	for _, c := range cells {
		f := c.frames(procName)
		s := &profile.Sample{Value: []int64{int64(c.Ns)},
			Label:    map[string][]string{"state": {c.State.String()}},
			NumLabel: map[string][]int64{"pid": {int64(c.Thread.PID)}, "tid": {int64(c.Thread.TID)}}}
		for i := len(f) - 1; i >= 0; i-- {
			s.Location = append(s.Location, locs.Named(f[i]))
		}
		p.Sample = append(p.Sample, s)
	}
	if err := p.CheckValid(); err != nil {
		return fmt.Errorf("pprof profile: %w", err)
	}
	return p.Write(w)
}
