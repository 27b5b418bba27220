package itrace

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"perfinsp/analysis/pprofloc"
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
// "" at a process's root) below its parent's path.
type stackNode struct {
	parent *stackNode
	fn     string
	pid    uint32
	count  uint64 // instructions of blocks run with this path the whole stack
	kids   []*stackNode
}

type childKey struct {
	parent *stackNode
	fn     string
}

// stackTree holds every process's call paths.
type stackTree struct {
	roots map[uint32]*stackNode
	kids  map[childKey]*stackNode
}

func (t *stackTree) root(pid uint32) *stackNode {
	r := t.roots[pid]
	if r == nil {
		r = &stackNode{pid: pid}
		t.roots[pid] = r
	}
	return r
}

func (t *stackTree) child(n *stackNode, fn string) *stackNode {
	if fn == "" {
		return n
	}
	k := childKey{n, fn}
	c := t.kids[k]
	if c == nil {
		c = &stackNode{parent: n, fn: fn, pid: n.pid}
		t.kids[k] = c
		n.kids = append(n.kids, c)
	}
	return c
}

// EnableStacks makes the replay keep instructions per call stack; call it
// before the first Apply.
func (rep *Report) EnableStacks() {
	rep.stacks = &stackTree{roots: map[uint32]*stackNode{}, kids: map[childKey]*stackNode{}}
}

// baseNode is the node of th's stack when no frame is open: its base
// function under the process's root.
func (rep *Report) baseNode(th *threadState) *stackNode {
	return rep.stacks.child(rep.stacks.root(th.pid), th.base)
}

// topNode is the node of th's current stack.
func (rep *Report) topNode(th *threadState) *stackNode {
	if n := len(th.stack); n > 0 {
		return th.stack[n-1].node
	}
	return rep.baseNode(th)
}

// pushNode is the node of a frame of function fn ("": a PLT call not yet
// through its stub) opened on th's current stack (nil without stacks).
func (rep *Report) pushNode(th *threadState, fn string) *stackNode {
	if rep.stacks == nil {
		return nil
	}
	return rep.stacks.child(rep.topNode(th), fn)
}

// renameTop gives th's top frame the function fn (a PLT call through its
// stub): its node is fn's under the frame below.
func (rep *Report) renameTop(th *threadState, fn string) {
	if rep.stacks == nil {
		return
	}
	n := len(th.stack)
	below := rep.baseNode(th)
	if n > 1 {
		below = th.stack[n-2].node
	}
	th.stack[n-1].node = rep.stacks.child(below, fn)
}

func (rep *Report) addStack(th *threadState, fn string, count uint32) {
	if rep.stacks == nil {
		return
	}
	n := rep.topNode(th)
	// the innermost frame is the block's function: it is the leaf
	if n.fn != fn {
		n = rep.stacks.child(n, fn)
	}
	n.count += uint64(count)
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

// walk calls visit for every node below the roots with a count, depth
// first (processes by pid, children by function key), with the path from
// the root's first function down to it and how much of that path's start
// is the previous call's (path[:same] is unchanged).
func (rep *Report) walk(visit func(pid uint32, path []*stackNode, same int)) {
	pids := make([]uint32, 0, len(rep.stacks.roots))
	for p := range rep.stacks.roots {
		pids = append(pids, p)
	}
	slices.Sort(pids)
	var path []*stackNode
	same := 0
	var rec func(n *stackNode)
	rec = func(n *stackNode) {
		path = append(path, n)
		if n.count > 0 {
			visit(n.pid, path, same)
			same = len(path)
		}
		slices.SortFunc(n.kids, func(a, b *stackNode) int { return strings.Compare(a.fn, b.fn) })
		for _, c := range n.kids {
			rec(c)
		}
		path = path[:len(path)-1]
		same = min(same, len(path))
	}
	for _, p := range pids {
		r := rep.stacks.roots[p]
		slices.SortFunc(r.kids, func(a, b *stackNode) int { return strings.Compare(a.fn, b.fn) })
		for _, c := range r.kids {
			rec(c)
		}
	}
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
	rep.walk(func(pid uint32, path []*stackNode, _ int) {
		num = strconv.AppendUint(append(num[:0], "pid "...), uint64(pid), 10)
		w.Write(num)
		for _, n := range path {
			name, ok := names[n.fn]
			if !ok {
				name = rep.display(n.fn)
				names[n.fn] = name
			}
			w.WriteByte(';')
			w.WriteString(name)
		}
		num = strconv.AppendUint(append(num[:0], ' '), path[len(path)-1].count, 10)
		w.Write(append(num, '\n'))
	})
	return w.Flush()
}

// WritePprof writes a pprof profile whose one sample type is instructions
// (count): flat = exclusive, cum = inclusive instructions of the ITrace.
func (rep *Report) WritePprof(out io.Writer) error {
	if rep.stacks == nil {
		return fmt.Errorf("itrace: stacks were not collected (EnableStacks)")
	}
	it := pprofloc.ValueType{Type: "instructions", Unit: "count"}
	s := pprofloc.NewStream(out, []pprofloc.ValueType{it}, it, 1)
	var locs []uint64
	rep.walk(func(pid uint32, path []*stackNode, same int) {
		// only the frames past the part shared with the previous path
		// are looked up
		locs = locs[:same]
		for _, n := range path[len(locs):] {
			var file string
			var line int64
			if fs := rep.Funcs[n.fn]; fs != nil {
				file, line = fs.File, int64(fs.Line)
			}
			locs = append(locs, s.Loc(n.fn, rep.display(n.fn), file, line))
		}
		s.Sample(locs, []int64{int64(path[len(path)-1].count)}, pprofloc.Label{Key: "pid", Num: int64(pid)})
	})
	return s.Close()
}
