package callflow

import "math"

// Calibration is what is taken off. Start-up (seed 002's inner / outer
// time): Inner per call of the function itself (its share of the two hooks
// around it), Outer per call it makes (the caller's share of each callee's
// hooks). Sequence minima (seed 000 / 003 §4.1), when Minima is set
// instead: each interval between two events loses the minimum observed
// for its transition over the whole run (two passes: Minima, then Build).
type Calibration struct {
	Inner, Outer float64
	Minima       *Minima
}

// Transitions between consecutive events of a thread: the key of the
// sequence minima (one method type; the key is the pair of event kinds).
const (
	SeqEnterEnter = iota // a call's first callee: charged to the caller
	SeqEnterExit         // a leaf call's body
	SeqExitEnter         // the caller between two callees
	SeqExitExit          // the caller after its last callee
	NumSeq
)

// SeqNames names the transitions.
var SeqNames = [NumSeq]string{"enter>enter", "enter>exit", "exit>enter", "exit>exit"}

// Minima is the minimum interval seen per transition, and how often each
// transition was seen.
type Minima struct {
	Min   [NumSeq]uint64
	Count [NumSeq]uint64
}

func seqOf(prev, cur uint8) int {
	switch {
	case prev == KindEnter && cur == KindEnter:
		return SeqEnterEnter
	case prev == KindEnter && cur == KindExit:
		return SeqEnterExit
	case prev == KindExit && cur == KindEnter:
		return SeqExitEnter
	case prev == KindExit && cur == KindExit:
		return SeqExitExit
	}
	return -1
}

// SequenceMinima is the first pass: the minimum interval per transition
// over every thread given.
func SequenceMinima(threads []*Thread) *Minima {
	m := &Minima{}
	for i := range m.Min {
		m.Min[i] = ^uint64(0)
	}
	for _, t := range threads {
		for i := 1; i < len(t.Events); i++ {
			p, e := t.Events[i-1], t.Events[i]
			k := seqOf(p.Kind, e.Kind)
			if k < 0 || e.Early < p.Late {
				continue
			}
			if d := e.Early - p.Late; d < m.Min[k] {
				m.Min[k] = d
			}
			m.Count[k]++
		}
	}
	for i := range m.Min {
		if m.Count[i] == 0 {
			m.Min[i] = 0
		}
	}
	return m
}

// Node is one call path of a thread's call tree.
type Node struct {
	Fn       uint64
	Name     string
	Parent   *Node
	Children []*Node
	index    map[uint64]*Node
	Level    int
	Calls    uint64 // times this path was entered
	Callees  uint64 // calls made from it
	Rough    uint64 // metric while it was on top of the stack, uncalibrated
	minima   uint64 // sequence minima taken off its intervals
	// Signed is Rough minus the calibration (may be below 0 when the
	// calibration over-corrects); Base is Signed rounded, at least 0;
	// Delta = Rough - Base is what calibration removed.
	Signed float64
	Base   uint64
	Delta  int64
	Cum    uint64 // Base of this node and everything below it
}

// Tree is the call tree of one thread.
type Tree struct {
	PID, TID int
	Root     *Node
	// Stack repair: frames closed without their exit (longjmp, an
	// exception, exit from a deep stack) and exits that matched no open
	// frame (tracing switched on in the middle of a call).
	Repaired, Unmatched, OpenAtEnd uint64
	Adjusted                       uint64 // metric of runtime pauses (buffer remaps) left out
	Resets                         int
	Partial                        bool
	Events                         int
}

func newNode(parent *Node, fn uint64) *Node {
	n := &Node{Fn: fn, Parent: parent}
	if parent != nil {
		n.Level = parent.Level + 1
	}
	return n
}

func (n *Node) child(fn uint64) *Node {
	if c := n.index[fn]; c != nil {
		return c
	}
	if n.index == nil {
		n.index = map[uint64]*Node{}
	}
	c := newNode(n, fn)
	n.index[fn] = c
	n.Children = append(n.Children, c)
	return c
}

// Build makes the call tree of one thread: each interval between the late
// read of one event and the early read of the next is charged to the
// function on top of the stack, then the calibration is applied.
func Build(t *Thread, cal Calibration) *Tree {
	tr := &Tree{PID: t.PID, TID: t.TID, Root: newNode(nil, 0), Partial: t.Partial, Events: len(t.Events)}
	stack := []*Node{tr.Root}
	sps := []uint64{^uint64(0)} // the stack pointer of each open frame
	var last uint64
	var prevKind uint8
	have, off := false, false
	for _, e := range t.Events {
		top := stack[len(stack)-1]
		if have && !off && e.Early >= last {
			d := e.Early - last
			top.Rough += d
			if cal.Minima != nil {
				if k := seqOf(prevKind, e.Kind); k >= 0 {
					top.minima += min(d, cal.Minima.Min[k])
				}
			}
		}
		prevKind = e.Kind
		switch e.Kind {
		case KindEnter:
			// Frames at or below the new one's stack pointer are gone
			// (longjmp, an exception): close them.
			for len(stack) > 1 && e.SP != 0 && sps[len(sps)-1] <= e.SP {
				stack, sps = stack[:len(stack)-1], sps[:len(sps)-1]
				tr.Repaired++
			}
			top = stack[len(stack)-1]
			c := top.child(e.Fn)
			c.Calls++
			top.Callees++
			stack, sps = append(stack, c), append(sps, e.SP)
		case KindExit:
			i := len(stack) - 1
			for i > 0 && stack[i].Fn != e.Fn {
				i--
			}
			if i == 0 {
				tr.Unmatched++
			} else {
				tr.Repaired += uint64(len(stack) - 1 - i)
				stack, sps = stack[:i], sps[:i]
			}
		case KindAdjust:
			if e.Late >= e.Early {
				tr.Adjusted += e.Late - e.Early
			}
		case KindMark:
			if e.Fn == MarkStart || e.Fn == MarkEnd || e.Fn == MarkReset {
				// The marker carries the process's reset count: figures
				// restart after a reset; open calls keep their place.
				if int(e.SP) != tr.Resets {
					tr.Resets = int(e.SP)
					tr.Root = newNode(nil, 0)
					ns := []*Node{tr.Root}
					for _, s := range stack[1:] {
						ns = append(ns, ns[len(ns)-1].child(s.Fn))
					}
					stack = ns
				}
			}
			switch e.Fn {
			case MarkEnd:
				off = true
				stack, sps = stack[:1], sps[:1]
			case MarkStart:
				off = false
				// Tracing was off: the calls open now are unknown.
				stack, sps = stack[:1], sps[:1]
			}
		}
		last, have = e.Late, true
	}
	tr.OpenAtEnd = uint64(len(stack) - 1)
	calibrate(tr.Root, cal)
	return tr
}

func calibrate(n *Node, cal Calibration) uint64 {
	n.Signed = float64(n.Rough)
	switch {
	case cal.Minima != nil:
		n.Signed -= float64(n.minima)
	case n.Parent != nil:
		n.Signed -= float64(n.Calls)*cal.Inner + float64(n.Callees)*cal.Outer
	}
	n.Base = 0
	if n.Signed > 0 {
		n.Base = uint64(math.Round(n.Signed))
	}
	n.Delta = int64(n.Rough) - int64(n.Base)
	n.Cum = n.Base
	for _, c := range n.Children {
		n.Cum += calibrate(c, cal)
	}
	return n.Cum
}

// Walk calls f for n and every node below it, depth first, in the order
// the calls were first made.
func (n *Node) Walk(f func(*Node)) {
	f(n)
	for _, c := range n.Children {
		c.Walk(f)
	}
}

// Path returns the functions from the thread's first frame down to n.
func (n *Node) Path() []*Node {
	var p []*Node
	for x := n; x != nil && x.Parent != nil; x = x.Parent {
		p = append(p, x)
	}
	for i, j := 0, len(p)-1; i < j; i, j = i+1, j-1 {
		p[i], p[j] = p[j], p[i]
	}
	return p
}
