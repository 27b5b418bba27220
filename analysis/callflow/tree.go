package callflow

import "math"

// Calibration is what is taken off. Start-up (the inner / outer time of
// the patent "Method and apparatus for performing time measurements during
// instrumentation-based profiling"): Inner per call of the function itself (its share of the two hooks
// around it), Outer per call it makes (the caller's share of each callee's
// hooks); InnerAPI / OuterAPI the same for calls recorded through
// hookit_enter / hookit_exit. Sequence minima (the patent "Compensating for
// instrumentation overhead using sequences of events"; PI's paper §4.1), when
// Minima is set instead: each interval between two events loses the
// minimum observed for its sequence key (two passes: SequenceMinima, then
// Build).
type Calibration struct {
	Inner, Outer       float64
	InnerAPI, OuterAPI float64
	Minima             *Minima
}

func transOf(kind uint8) int {
	switch kind {
	case KindEnter:
		return TransEnter
	case KindExit:
		return TransExit
	case KindExcExit:
		return TransExcExit
	}
	return -1
}

// Node is one call path of a thread's call tree.
type Node struct {
	Fn       uint64
	Type     uint8 // method type of its first entry
	api      bool  // entered through hookit_enter
	Name     string
	Parent   *Node
	Children []*Node
	index    map[uint64]*Node
	Level    int
	Calls    uint64 // times this path was entered
	Callees  uint64 // calls made from it
	Rough    uint64 // metric while it was on top of the stack, uncalibrated
	DS, IN   uint64 // dispatches, interrupts while it was on top (kmod backend)
	// SysN, Sys: system calls made while it was on top and the metric
	// they took (Info.Sys "in": part of Rough; "out": not).
	SysN, Sys uint64
	// FltN, Flt: user page faults taken while it was on top and the
	// metric they took (Info.Faults "in": part of Rough; "out": not).
	FltN, Flt uint64
	minima    uint64 // sequence minima taken off its intervals
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
	Life     int // Thread.Life
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

func (n *Node) child(fn uint64, typ uint8, api bool) *Node {
	if c := n.index[fn]; c != nil {
		return c
	}
	if n.index == nil {
		n.index = map[uint64]*Node{}
	}
	c := newNode(n, fn)
	c.Type, c.api = typ, api
	n.index[fn] = c
	n.Children = append(n.Children, c)
	return c
}

// Build makes the call tree of one thread: each interval between the late
// read of one event and the early read of the next is charged to the
// function on top of the stack, then the calibration is applied. The
// events are streamed (Thread.Each): memory follows the tree, not the
// number of events. A thread file that cannot be read gives the tree of
// what was read, marked Partial, and the error.
func Build(t *Thread, cal Calibration) *Tree {
	tr, _ := BuildErr(t, cal)
	return tr
}

// BuildErr is Build, with the error of reading the thread's file.
func BuildErr(t *Thread, cal Calibration) (*Tree, error) {
	k := SeqKeyPI
	if cal.Minima != nil {
		k = cal.Minima.Key
	}
	return build(t, cal, nil, k)
}

// builder folds one thread's events into its tree.
type builder struct {
	tr       *Tree
	cal      Calibration
	interval func(key int, d uint64)
	k        SeqKey
	stack    []*Node
	sps      []uint64 // the stack pointer of each open frame
	last     uint64
	// The previous event: its transition and the method before it (M1 of
	// the next interval's key M1 -T1-> M2 -T2-> M3).
	prevTrans int
	prevM1    uint8
	have, off bool
	// what the calibration takes off an interval, by sequence key
	// (cal.Minima.Off of every key, looked up once)
	offs []uint64
}

// build is Build; interval, if set, gets each interval's sequence key
// (width k) and metric (the first pass of the sequence minima).
func build(t *Thread, cal Calibration, interval func(key int, d uint64), k SeqKey) (*Tree, error) {
	b := &builder{tr: &Tree{PID: t.PID, TID: t.TID, Life: t.Life, Root: newNode(nil, 0)}, cal: cal, interval: interval, k: k, prevTrans: -1}
	b.stack = []*Node{b.tr.Root}
	b.sps = []uint64{^uint64(0)}
	if cal.Minima != nil {
		b.offs = make([]uint64, k.Size())
		for key := range b.offs {
			b.offs[key] = cal.Minima.Off(key)
		}
	}
	err := t.Each(b.add)
	tr := b.tr
	tr.Partial = t.Partial || err != nil
	tr.OpenAtEnd = uint64(len(b.stack) - 1)
	calibrate(tr.Root, cal)
	return tr, err
}

// charge gives the interval ending at e to the function on top.
func (b *builder) charge(e *Event, top *Node, trans int) {
	if !b.have || b.off || e.Early < b.last {
		return
	}
	d := e.Early - b.last
	top.Rough += d
	top.DS += uint64(e.DS)
	top.IN += uint64(e.IN)
	top.SysN += uint64(e.SysN)
	top.Sys += e.Sys
	top.FltN += uint64(e.FltN)
	top.Flt += e.Flt
	if trans < 0 || b.prevTrans < 0 || (b.cal.Minima == nil && b.interval == nil) {
		return
	}
	m3 := e.Type // entry: the callee
	if trans != TransEnter {
		m3 = 0 // exit: the caller of the method that returns
		if len(b.stack) > 1 {
			m3 = b.stack[len(b.stack)-2].Type
		}
	}
	key := b.k.Of(b.prevM1, b.prevTrans, top.Type, trans, m3)
	if b.interval != nil {
		b.interval(key, d)
	}
	if b.cal.Minima != nil {
		top.minima += min(d, b.cal.Minima.Off(key))
	}
}

func (b *builder) add(e *Event) {
	tr := b.tr
	tr.Events++
	top := b.stack[len(b.stack)-1]
	trans := transOf(e.Kind)
	b.charge(e, top, trans)
	if trans >= 0 {
		b.prevTrans = trans
		b.prevM1 = top.Type // entry: the caller; exit: the method that returns
	}
	switch e.Kind {
	case KindEnter:
		b.enter(e)
	case KindExit, KindExcExit:
		i := len(b.stack) - 1
		for i > 0 && b.stack[i].Fn != e.Fn {
			i--
		}
		if i == 0 {
			tr.Unmatched++
		} else {
			tr.Repaired += uint64(len(b.stack) - 1 - i)
			b.stack, b.sps = b.stack[:i], b.sps[:i]
		}
	case KindAdjust:
		if e.Late >= e.Early {
			tr.Adjusted += e.Late - e.Early
		}
	case KindMark:
		b.mark(e)
	}
	b.last, b.have = e.Late, true
}

func (b *builder) enter(e *Event) {
	// Frames at or below the new one's stack pointer are gone (longjmp,
	// an exception): close them; but a function inlined into the one on
	// top enters at its stack pointer. Frames entered through the API
	// (stack pointer 0) are never closed this way.
	for len(b.stack) > 1 && e.SP != 0 && (b.sps[len(b.sps)-1] < e.SP || b.sps[len(b.sps)-1] == e.SP && !e.Inlined) {
		b.stack, b.sps = b.stack[:len(b.stack)-1], b.sps[:len(b.sps)-1]
		b.tr.Repaired++
	}
	top := b.stack[len(b.stack)-1]
	c := top.child(e.Fn, e.Type, e.API)
	c.Calls++
	top.Callees++
	sp := e.SP
	if sp == 0 {
		sp = ^uint64(0)
	}
	b.stack, b.sps = append(b.stack, c), append(b.sps, sp)
}

func (b *builder) mark(e *Event) {
	tr := b.tr
	if e.Fn == MarkStart || e.Fn == MarkEnd || e.Fn == MarkReset {
		// The marker carries the process's reset count: figures restart
		// after a reset; open calls keep their place.
		if int(e.SP) != tr.Resets {
			tr.Resets = int(e.SP)
			tr.Root = newNode(nil, 0)
			ns := []*Node{tr.Root}
			for _, s := range b.stack[1:] {
				ns = append(ns, ns[len(ns)-1].child(s.Fn, s.Type, s.api))
			}
			b.stack = ns
		}
	}
	switch e.Fn {
	case MarkEnd:
		b.off = true
		b.stack, b.sps = b.stack[:1], b.sps[:1]
	case MarkStart:
		b.off = false
		// Tracing was off: the calls open now are unknown.
		b.stack, b.sps = b.stack[:1], b.sps[:1]
	}
}

func calibrate(n *Node, cal Calibration) uint64 {
	n.Signed = float64(n.Rough)
	switch {
	case cal.Minima != nil:
		n.Signed -= float64(n.minima)
	case n.Parent != nil:
		n.Signed -= float64(n.Calls) * cal.inner(n.api)
		// Each callee's share of its caller, by the path it came through.
		for _, c := range n.Children {
			n.Signed -= float64(c.Calls) * cal.outer(c.api)
		}
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

func (c Calibration) inner(api bool) float64 {
	if api {
		return c.InnerAPI
	}
	return c.Inner
}

func (c Calibration) outer(api bool) float64 {
	if api {
		return c.OuterAPI
	}
	return c.Outer
}
