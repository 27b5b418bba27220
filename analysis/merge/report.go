package merge

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/google/pprof/profile"
	"perfinsp/analysis/pprofloc"
)

// Row is one row of a thread's call tree report (FIG. 20, FIG. 29).
type Row struct {
	Lvl, RL                     int
	Calls, Base, Cum, Ticks, Ct uint64
	Sampled                     bool
	Name                        string
}

// Rows lists a thread's tree depth first, as the call tree report prints it.
func (t *Thread) Rows() []Row {
	var rows []Row
	t.Root.Walk(func(n *Node) {
		rows = append(rows, Row{n.Level, n.RL, n.Calls, n.Base, n.Cum, n.Ticks, n.CumTicks, n.Sampled, n.Name})
	})
	return rows
}

// Label names a thread in reports.
func (t *Thread) Label() string {
	if t.Name != "" {
		return fmt.Sprintf("pid %d tid %d (%s)", t.PID, t.TID, t.Name)
	}
	return fmt.Sprintf("pid %d tid %d", t.PID, t.TID)
}

// WriteTree writes every thread's merged call tree (PI's form, FIG. 20 with
// the ticks of FIG. 29): units is the time unit's name. Sampled nodes are
// marked with +.
func (m *Merger) WriteTree(w io.Writer, units string) error {
	fmt.Fprintf(w, "Merged call tree: entry/exit events and tprof ticks\n")
	fmt.Fprintf(w, "Units : %s, Ticks\nTotal : %d ticks, %d events\n", units, m.Ticks, m.Events)
	for _, n := range m.Notes {
		fmt.Fprintln(w, n)
	}
	for _, t := range m.Threads {
		fmt.Fprintf(w, "\n Thread %s: %d ticks, time %d\n\n", t.Label(), t.Root.CumTicks, t.Root.Cum)
		fmt.Fprintf(w, "%4s %3s %8s %12s %12s %8s %8s  %s\n", "Lvl", "RL", "Calls", "Base", "Cum", "Ticks", "CumTk", "Indent Name")
		for _, r := range t.Rows() {
			mark := ""
			if r.Sampled {
				mark = "+"
			}
			fmt.Fprintf(w, "%4d %3d %8d %12d %12d %8d %8d  %s%s%s\n", r.Lvl, r.RL, r.Calls, r.Base, r.Cum, r.Ticks, r.Ct,
				strings.Repeat("- ", r.Lvl), mark, r.Name)
		}
	}
	return writeProblems(w, m.Problems)
}

func writeProblems(w io.Writer, p map[string]uint64) error {
	if len(p) == 0 {
		return nil
	}
	keys := make([]string, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	fmt.Fprintln(w, "\nRecords the merge could not use:")
	for _, k := range keys {
		fmt.Fprintf(w, "  %d × %s\n", p[k], k)
	}
	return nil
}

// FlatRow is one routine of the flat report (FIG. 26): Cum sums the
// routine's outermost instances (RL 1), Cum2 all of them.
type FlatRow struct {
	Name                                string
	Calls, Base, Cum, Cum2, Ticks, CumT uint64
}

// Flat sums every thread's nodes by name, largest Cum first (event nodes
// only for Calls; sampled nodes add their ticks).
func (m *Merger) Flat() []FlatRow {
	by := map[string]*FlatRow{}
	var order []string
	for _, t := range m.Threads {
		t.Root.Walk(func(n *Node) {
			r := by[n.Name]
			if r == nil {
				r = &FlatRow{Name: n.Name}
				by[n.Name] = r
				order = append(order, n.Name)
			}
			r.Calls += n.Calls
			r.Base += n.Base
			r.Ticks += n.Ticks
			r.Cum2 += n.Cum
			if n.RL == 1 {
				r.Cum += n.Cum
				r.CumT += n.CumTicks
			}
		})
	}
	rows := make([]FlatRow, 0, len(order))
	for _, n := range order {
		rows = append(rows, *by[n])
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].Cum > rows[j].Cum })
	return rows
}

// ArcRow is one row of an ArcFlow stanza (FIG. 27).
type ArcRow struct {
	Source                        string // Parent, rParent, Self, Child, rChild
	Name                          string
	Calls, Base, Cum, Cum2, Ticks uint64
	CumTicks                      uint64
}

// ArcFlow returns one stanza per routine, largest Cum first. Parent rows
// break down the Self row by caller: the routine's outermost instances
// (RL 1) as Parent, its recursive ones as rParent, so Σ Parent+rParent
// calls = Self calls, Σ Parent+rParent base = Self base and Σ Parent cum
// = Self cum. Child rows are the callees of the outermost instances
// (rChild: of the recursive ones), so Σ Child cum = Self cum − the base of
// the outermost instances.
func (m *Merger) ArcFlow() [][]ArcRow {
	type agg struct {
		rows  map[string]*ArcRow
		order []string
	}
	add := func(a *agg, src, name string, n *Node) {
		k := src + "\x00" + name
		if a.rows == nil {
			a.rows = map[string]*ArcRow{}
		}
		r := a.rows[k]
		if r == nil {
			r = &ArcRow{Source: src, Name: name}
			a.rows[k] = r
			a.order = append(a.order, k)
		}
		r.Calls += n.Calls
		r.Base += n.Base
		r.Cum += n.Cum
		r.Ticks += n.Ticks
		r.CumTicks += n.CumTicks
	}
	parents, children := map[string]*agg{}, map[string]*agg{}
	get := func(m map[string]*agg, k string) *agg {
		if m[k] == nil {
			m[k] = &agg{}
		}
		return m[k]
	}
	for _, t := range m.Threads {
		t.Root.Walk(func(n *Node) {
			if n.Parent != nil {
				src := "Parent"
				if n.RL > 1 {
					src = "rParent"
				}
				add(get(parents, n.Name), src, n.Parent.Name, n)
			}
			for _, c := range n.Children {
				src := "Child"
				if n.RL > 1 {
					src = "rChild"
				}
				add(get(children, n.Name), src, c.Name, c)
			}
		})
	}
	var out [][]ArcRow
	for _, f := range m.Flat() {
		var st []ArcRow
		if a := parents[f.Name]; a != nil {
			for _, k := range a.order {
				st = append(st, *a.rows[k])
			}
		}
		st = append(st, ArcRow{Source: "Self", Name: f.Name, Calls: f.Calls, Base: f.Base, Cum: f.Cum, Cum2: f.Cum2, Ticks: f.Ticks, CumTicks: f.CumT})
		if a := children[f.Name]; a != nil {
			for _, k := range a.order {
				st = append(st, *a.rows[k])
			}
		}
		out = append(out, st)
	}
	return out
}

// WriteArcFlow writes the flat report (FIG. 26) and the ArcFlow stanzas
// (FIG. 27) with a ticks column.
func (m *Merger) WriteArcFlow(w io.Writer, units string) error {
	fmt.Fprintf(w, "Flat: every routine (Cum: outermost instances, Cum2: all instances)\nUnits : %s, Ticks\n\n", units)
	fmt.Fprintf(w, "%8s %12s %12s %12s %8s  %s\n", "Calls", "Base", "Cum", "Cum2", "Ticks", "Name")
	for _, r := range m.Flat() {
		fmt.Fprintf(w, "%8d %12d %12d %12d %8d  %s\n", r.Calls, r.Base, r.Cum, r.Cum2, r.Ticks, r.Name)
	}
	fmt.Fprintf(w, "\nArcFlow\n Base - time (and ticks) directly in the routine\n Cum  - time (and ticks) directly and indirectly in the routine\n")
	fmt.Fprintf(w, " Invariants: Σ Parent+rParent calls = Self calls; Σ Parent+rParent base = Self base;\n   Σ Parent cum = Self cum; Σ Child cum = Self cum − base of the outermost instances\n")
	for i, st := range m.ArcFlow() {
		fmt.Fprintf(w, "\n%s\n%-8s %8s %12s %12s %8s %8s  %s\n", strings.Repeat("=", 72), "Source", "Calls", "Base", "Cum", "Ticks", "CumTk", "Function")
		for _, r := range st {
			name := r.Name
			if r.Source == "Self" {
				name = fmt.Sprintf("[%d] %s", i, r.Name)
			} else {
				name = "  " + name
			}
			cum := fmt.Sprint(r.Cum)
			if r.Source == "Self" && r.Cum2 != r.Cum {
				cum = fmt.Sprintf("%d %d", r.Cum, r.Cum2)
			}
			fmt.Fprintf(w, "%-8s %8d %12d %12s %8d %8d  %s\n", r.Source, r.Calls, r.Base, cum, r.Ticks, r.CumTicks, name)
		}
	}
	return nil
}

// Profile is the merged trees as a pprof profile with two values per
// node: ticks and time (units names the time unit).
func (m *Merger) Profile(units string) *profile.Profile {
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "ticks", Unit: "count"}, {Type: "time", Unit: units}},
		PeriodType: &profile.ValueType{Type: "ticks", Unit: "count"},
		Period:     1,
	}
	loc := pprofloc.New(p).Named
	for _, t := range m.Threads {
		label := fmt.Sprintf("pid_%d_tid_%d", t.PID, t.TID)
		labels := map[string][]string{"thread": {label}} // one for the thread's samples: a tree has millions
		t.Root.Walk(func(n *Node) {
			if n.Ticks == 0 && n.Base == 0 {
				return
			}
			var stack []*profile.Location
			for x := n; x.Parent != nil; x = x.Parent {
				stack = append(stack, loc(x.Name))
			}
			stack = append(stack, loc(label))
			p.Sample = append(p.Sample, &profile.Sample{Location: stack, Value: []int64{int64(n.Ticks), int64(n.Base)},
				Label: labels})
		})
	}
	return p
}

// WritePprof writes the gzipped pprof profile of Profile.
func (m *Merger) WritePprof(w io.Writer, units string) error {
	if err := m.Profile(units).Write(w); err != nil {
		return fmt.Errorf("writing the merged pprof profile: %w", err)
	}
	return nil
}
