package tprof

import (
	"fmt"
	"io"
	"sort"
	"strings"
)

// foldedEscaper escapes in a name only what the folded format requires:
// ';' separates frames (it becomes ':') and a line is one stack. Spaces
// stay (flamegraph.pl and post read the count after the last one), so a
// function is spelled the same in folded stacks, flame graphs, the call
// tree and pprof.
var foldedEscaper = strings.NewReplacer(";", ":", "\n", " ", "\r", " ")

// frameName is a frame's name in folded stacks and flame graphs: the
// symbol, with "_[k]" for kernel frames (flamegraph.pl's convention).
func frameName(f Frame) string {
	n := foldedEscaper.Replace(f.Symbol)
	if f.Kernel {
		n += "_[k]"
	}
	return n
}

func cleanLabel(s string) string { return foldedEscaper.Replace(s) }

// stackNames names the frames of the stacks for folded stacks and call
// trees, each resolved name computed once: frame(idx, kernel) is
// frameName of rep.res[idx], proc(pid) the process title escaped (cleanLabel).
type stackNames struct {
	rep   *Report
	frame []string // 2*idx (+1 for a kernel frame); "" not yet computed
	done  []bool
	procs map[uint32]string
}

func (rep *Report) stackNames() *stackNames {
	return &stackNames{rep: rep, frame: make([]string, 2*len(rep.res)), done: make([]bool, 2*len(rep.res)), procs: map[uint32]string{}}
}

func (sn *stackNames) name(idx int32, kernel bool) string {
	i := 2 * int(idx)
	if kernel {
		i++
	}
	if !sn.done[i] {
		r := &sn.rep.res[idx]
		sn.frame[i], sn.done[i] = frameName(Frame{Module: r.Module, Symbol: r.Symbol, Kernel: kernel}), true
	}
	return sn.frame[i]
}

func (sn *stackNames) proc(pid uint32) string {
	n, ok := sn.procs[pid]
	if !ok {
		n = cleanLabel(sn.rep.ProcTitle(pid))
		sn.procs[pid] = n
	}
	return n
}

// folded returns the folded stacks: "process;root;...;leaf" -> ticks. With
// call stacks in the trace, one frame per function root to leaf (a stack
// cut at the depth limit starts with "[truncated]"); without them, the
// process, module and symbol of each tick.
func (rep *Report) folded() map[string]uint64 {
	m := map[string]uint64{}
	if len(rep.stk) > 0 {
		sn := rep.stackNames()
		var b []byte
		for i := range rep.stk {
			e := &rep.stk[i]
			b = append(b[:0], sn.proc(e.pid)...)
			if e.truncated {
				b = append(b, ";[truncated]"...)
			}
			kern := len(e.frames) - e.kernel
			for j, idx := range e.frames {
				b = append(b, ';')
				b = append(b, sn.name(idx, j >= kern)...)
			}
			m[string(b)] += e.n
		}
		return m
	}
	for k, n := range rep.TickCounts() {
		m[cleanLabel(rep.ProcTitle(k.PID))+";"+cleanLabel(k.Module)+";"+cleanLabel(k.Symbol)] += n
	}
	return m
}

// node is a call-tree node: ticks in it and under it (Incl), in it (Excl);
// its children are found by their name's number in the tree's names (a
// short list searched in order, most nodes have one or two children; a map
// from a few more).
type node struct {
	name       string
	id         int32
	incl, excl uint64
	list       []*node
	kids       map[int32]*node
}

const nodeListMax = 8

func (n *node) child(id int32, name string) *node {
	if n.kids == nil {
		for _, c := range n.list {
			if c.id == id {
				return c
			}
		}
		c := &node{name: name, id: id}
		if len(n.list) < nodeListMax {
			n.list = append(n.list, c)
			return c
		}
		n.kids = make(map[int32]*node, 2*nodeListMax)
		for _, k := range n.list {
			n.kids[k.id] = k
		}
		n.list = nil
		n.kids[id] = c
		return c
	}
	c := n.kids[id]
	if c == nil {
		c = &node{name: name, id: id}
		n.kids[id] = c
	}
	return c
}

// children returns the children in no particular order.
func (n *node) children() []*node {
	if n.kids == nil {
		return n.list
	}
	out := make([]*node, 0, len(n.kids))
	for _, c := range n.kids {
		out = append(out, c)
	}
	return out
}

func (n *node) sorted() []*node {
	out := append([]*node(nil), n.children()...)
	sort.Slice(out, func(i, j int) bool {
		if out[i].incl != out[j].incl {
			return out[i].incl > out[j].incl
		}
		return out[i].name < out[j].name
	})
	return out
}

// nameIDs numbers names: equal names, one number.
type nameIDs map[string]int32

func (ids nameIDs) id(name string) int32 {
	i, ok := ids[name]
	if !ok {
		i = int32(len(ids))
		ids[name] = i
	}
	return i
}

// tree builds the call tree: root, then one child per process, then the
// functions root to leaf — the folded stacks' lines, split at ';' (with
// call stacks built from the stacks directly, each name numbered once).
func (rep *Report) tree() *node {
	root := &node{name: "all"}
	ids := nameIDs{}
	if len(rep.stk) > 0 {
		sn := rep.stackNames()
		frameID := make([]int32, 2*len(rep.res))
		for i := range frameID {
			frameID[i] = -1
		}
		procID := map[uint32]int32{}
		trunc := "[truncated]"
		truncID := ids.id(trunc)
		for i := range rep.stk {
			e := &rep.stk[i]
			cur := root
			cur.incl += e.n
			pid, ok := procID[e.pid]
			if !ok {
				pid = ids.id(sn.proc(e.pid))
				procID[e.pid] = pid
			}
			cur = cur.child(pid, sn.proc(e.pid))
			cur.incl += e.n
			if e.truncated {
				cur = cur.child(truncID, trunc)
				cur.incl += e.n
			}
			kern := len(e.frames) - e.kernel
			for j, idx := range e.frames {
				k := 2 * int(idx)
				if j >= kern {
					k++
				}
				id := frameID[k]
				name := sn.name(idx, j >= kern)
				if id < 0 {
					id = ids.id(name)
					frameID[k] = id
				}
				cur = cur.child(id, name)
				cur.incl += e.n
			}
			cur.excl += e.n
		}
		return root
	}
	for k, n := range rep.folded() {
		cur := root
		cur.incl += n
		for _, part := range strings.Split(k, ";") {
			cur = cur.child(ids.id(part), part)
			cur.incl += n
		}
		cur.excl += n
	}
	return root
}

// CallTreeMinPct is the share of all ticks below which the call-tree
// section of tprof.out leaves a node out (its ticks stay in its parent's
// inclusive count).
const CallTreeMinPct = 0.5

// writeCallTree writes tprof.out's call-tree section: caller to callee per
// process, inclusive and exclusive ticks.
func (rep *Report) writeCallTree(w io.Writer) {
	fmt.Fprintln(w, "================================================================")
	fmt.Fprintln(w, ")) Call_Tree")
	fmt.Fprintln(w, "================================================================")
	fmt.Fprintln(w)
	fmt.Fprintf(w, " %d of %d ticks have a call stack (%d cut at the depth limit); caller above callee, nodes under %.1f %% of all ticks left out;\n"+
		" %%INCL is the share of all ticks with a stack, %%PROC the share of the process's ticks with a stack\n\n",
		rep.StackTicks, rep.Total, rep.TruncatedStacks, CallTreeMinPct)
	fmt.Fprintf(w, "%4s %10s %10s %7s %7s  %s\n", "LVL", "INCL", "EXCL", "%INCL", "%PROC", "NAME")
	root := rep.tree()
	min := uint64(float64(rep.StackTicks) * CallTreeMinPct / 100)
	var walk func(n *node, lvl int, proc uint64)
	walk = func(n *node, lvl int, proc uint64) {
		for _, c := range n.sorted() {
			if c.incl < min || c.incl == 0 {
				continue
			}
			if lvl == 0 {
				proc = c.incl
			}
			fmt.Fprintf(w, "%4d %10d %10d %7.2f %7.2f  %s%s\n", lvl, c.incl, c.excl, pct(c.incl, rep.StackTicks), pct(c.incl, proc), strings.Repeat(" ", lvl), c.name)
			walk(c, lvl+1, proc)
		}
	}
	walk(root, 0, 0)
	fmt.Fprintln(w)
}
