package itrace

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// Call stacks weighted by instructions (post --itrace-folded, --itrace-pprof):
// every block's instructions go to the thread's call stack at that moment
// (root first, the block's function last), so a flame graph of an ITrace
// shows where instructions were executed, exactly.
//
// The stacks are a tree per process (a calling-context tree): a frame
// holds the node of its call path, a call adds at most one node, and the
// writers walk the tree, so memory and time follow the number of distinct
// paths, not the sum of their depths (a recursion 10,000 deep has 10,000
// paths averaging 5,000 frames). Only the folded text itself, one full
// stack per line, grows with that sum.

// stackNode is one call path of a process: its function (a Funcs key;
// "" at a process's root) below its parent's path, called from site.
type stackNode struct {
	parent *stackNode
	fn     string
	pid    uint32
	count  uint64 // instructions of blocks run with this path the whole stack
	kids   []*stackNode
	// With a Placer (PlaceStacks): the traced address of the call
	// instruction in the parent's function (0: entered otherwise: a
	// signal, a jump into a function's middle, the thread's base), the
	// call's place in its module's file, and the blocks run as the leaf.
	site   uint64
	at     filePlace
	blocks map[leafBlock]*leafRuns
}

type childKey struct {
	parent *stackNode
	fn     string
	site   uint64
}

// stackTree holds every process's call paths.
type stackTree struct {
	roots map[uint32]*stackNode
	kids  map[childKey]*stackNode
	// with a Placer: the modules the places name (a filePlace's mod
	// indexes mods)
	mods   []string
	modIdx map[string]int32
}

func (t *stackTree) root(pid uint32) *stackNode {
	r := t.roots[pid]
	if r == nil {
		r = &stackNode{pid: pid}
		t.roots[pid] = r
	}
	return r
}

func (t *stackTree) child(n *stackNode, fn string, site uint64) *stackNode {
	if fn == "" {
		return n
	}
	k := childKey{n, fn, site}
	c := t.kids[k]
	if c == nil {
		c = &stackNode{parent: n, fn: fn, pid: n.pid, site: site}
		t.kids[k] = c
		n.kids = append(n.kids, c)
	}
	return c
}

// EnableStacks makes the replay keep instructions per call stack; call it
// before the first Apply.
func (rep *Report) EnableStacks() {
	rep.stacks = &stackTree{roots: map[uint32]*stackNode{}, kids: map[childKey]*stackNode{}, modIdx: map[string]int32{}}
}

// baseNode is the node of th's stack when no frame is open: its base
// function under the process's root.
func (rep *Report) baseNode(th *threadState) *stackNode {
	return rep.stacks.child(rep.stacks.root(th.pid), th.base, 0)
}

// topNode is the node of th's current stack.
func (rep *Report) topNode(th *threadState) *stackNode {
	if n := len(th.stack); n > 0 {
		return th.stack[n-1].node
	}
	return rep.baseNode(th)
}

// pushNode is the node of a frame of function fn ("": a PLT call not yet
// through its stub) opened on th's current stack by the branch at site (0:
// none; nil without stacks).
func (rep *Report) pushNode(th *threadState, fn string, site uint64) *stackNode {
	if rep.stacks == nil {
		return nil
	}
	top := rep.topNode(th)
	if fn == "" {
		return top
	}
	return rep.callee(th, top, fn, site)
}

// callee is the node of fn called at site from th's frame of node n.
func (rep *Report) callee(th *threadState, n *stackNode, fn string, site uint64) *stackNode {
	if rep.placer == nil {
		site = 0
	}
	c := rep.stacks.child(n, fn, site)
	if c.site != 0 && c.at.mod == 0 {
		c.at = rep.place(th.pid, c.site)
	}
	return c
}

// renameTop gives th's top frame the function fn (a PLT call through its
// stub): its node is fn's under the frame below, from the same call site.
func (rep *Report) renameTop(th *threadState, fn string) {
	if rep.stacks == nil {
		return
	}
	n := len(th.stack)
	below := rep.baseNode(th)
	if n > 1 {
		below = th.stack[n-2].node
	}
	th.stack[n-1].node = rep.callee(th, below, fn, th.stack[n-1].callSite)
}

// addStack counts count instructions of th's block (its last instruction
// at offset last from its first; -1: not known) to th's call stack.
func (rep *Report) addStack(th *threadState, fn string, count uint32, last int64) {
	if rep.stacks == nil {
		return
	}
	n := rep.topNode(th)
	// the innermost frame is the block's function: it is the leaf
	if n.fn != fn {
		n = rep.stacks.child(n, fn, 0)
	}
	n.count += uint64(count)
	if rep.placer != nil {
		rep.addLeafBlock(th, n, count, last)
	}
}

func (rep *Report) display(k string) string {
	if f := rep.Funcs[k]; f != nil && f.Name != "" {
		return f.Name
	}
	if name, _, _ := strings.Cut(k, "\x00"); name != "" {
		return name
	}
	return "[unknown]"
}

// walkFolded calls visit for every call path with instructions, by
// function (the paths through different call sites of the same functions
// are one), depth first (processes by pid, callees by function key), with
// its functions from the root's first down and its instructions.
func (rep *Report) walkFolded(visit func(pid uint32, path []string, count uint64)) {
	var path []string
	var rec func(group []*stackNode)
	rec = func(group []*stackNode) {
		path = append(path, group[0].fn)
		var count uint64
		for _, n := range group {
			count += n.count
		}
		if count > 0 {
			visit(group[0].pid, path, count)
		}
		kids := group[0].kids
		if len(group) > 1 {
			kids = nil
			for _, n := range group {
				kids = append(kids, n.kids...)
			}
		}
		sortKids(kids)
		for i := 0; i < len(kids); {
			j := i + 1
			for j < len(kids) && kids[j].fn == kids[i].fn {
				j++
			}
			rec(kids[i:j:j])
			i = j
		}
		path = path[:len(path)-1]
	}
	for _, p := range rep.pids() {
		r := rep.stacks.roots[p]
		sortKids(r.kids)
		for _, c := range r.kids {
			rec([]*stackNode{c})
		}
	}
}

// sortKids orders call paths by function key, then call site.
func sortKids(kids []*stackNode) {
	slices.SortFunc(kids, func(a, b *stackNode) int {
		if c := strings.Compare(a.fn, b.fn); c != 0 {
			return c
		}
		return cmp.Compare(a.site, b.site)
	})
}

// pids are the processes with stacks, in order.
func (rep *Report) pids() []uint32 {
	pids := make([]uint32, 0, len(rep.stacks.roots))
	for p := range rep.stacks.roots {
		pids = append(pids, p)
	}
	slices.Sort(pids)
	return pids
}

// WriteFolded writes "pid N;root;...;leaf instructions" lines
// (flamegraph.pl, speedscope), one per distinct stack.
func (rep *Report) WriteFolded(out io.Writer) error {
	if rep.stacks == nil {
		return fmt.Errorf("itrace: stacks were not collected (EnableStacks)")
	}
	w := bufio.NewWriterSize(out, 256<<10)
	names := map[string]string{}
	var num []byte
	rep.walkFolded(func(pid uint32, path []string, count uint64) {
		num = strconv.AppendUint(append(num[:0], "pid "...), uint64(pid), 10)
		w.Write(num)
		for _, fn := range path {
			name, ok := names[fn]
			if !ok {
				name = rep.display(fn)
				names[fn] = name
			}
			w.WriteByte(';')
			w.WriteString(name)
		}
		num = strconv.AppendUint(append(num[:0], ' '), count, 10)
		w.Write(append(num, '\n'))
	})
	return w.Flush()
}
