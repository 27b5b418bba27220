// Package merge builds one call tree per thread from a trace that holds
// both method entry/exit events and tprof samples (the patent "Process and
// system for merging trace data for primarily interpreted methods";
// docs/jprof.md): the events give the tree its shape and its
// times (each interval between two events of a thread is charged to the
// node current on that thread), and every tick lands in the node current on
// its thread at the tick's time. A tick whose PC is in the interpreter is
// charged to the interpreted method being run; a tick elsewhere (native
// code below the current method) hangs below the current node as a
// "sampled" node, and a tick with a call stack (UNWIND record) hangs its
// frames below the deepest frame that is on the thread's event stack
// (FIG. 32/33).
package merge

import (
	"fmt"
	"sort"
	"strings"

	"perfinsp/format/trace"
)

// Method event records (FIG. 30): major trace.MajorInterp (interpreted) or
// trace.MajorJitted (jitted), minor MinorEntry or MinorExit, data as u32
// words (LayoutWords): pid, tid, method id low, method id high. The
// method's name comes from a JIT_METHOD record (major trace.MajorJITLoad,
// minor trace.JITMethod) of the same pid and id.
const (
	MinorEntry uint32 = 0x10
	MinorExit         = MinorEntry | trace.ExitBit
)

// RootName is the name of every thread's root node (PI's pt_pidtid row).
const RootName = "pt_pidtid"

// Node is one call path of a thread.
type Node struct {
	Name     string
	Parent   *Node
	Children []*Node
	index    map[string]*Node
	Level    int
	RL       int  // how many nodes of this name are on the path, itself included
	Sampled  bool // created by a sample, not by an entry event
	Calls    uint64
	Base     uint64 // time while this node was current (trace clock)
	Cum      uint64 // Base of this node and everything below it
	Ticks    uint64 // ticks that landed in this node
	CumTicks uint64 // Ticks of this node and everything below it
}

func (n *Node) child(name string, sampled bool) *Node {
	key := name
	if sampled {
		key = "+" + name
	}
	if c := n.index[key]; c != nil {
		return c
	}
	c := &Node{Name: name, Parent: n, Level: n.Level + 1, Sampled: sampled, RL: 1}
	for p := n; p != nil; p = p.Parent {
		if p.Name == name && p.Parent != nil {
			c.RL++
		}
	}
	if n.index == nil {
		n.index = map[string]*Node{}
	}
	n.index[key] = c
	n.Children = append(n.Children, c)
	return c
}

// Walk calls f for n and every node below it, depth first, children in
// the order they were first seen.
func (n *Node) Walk(f func(*Node)) {
	f(n)
	for _, c := range n.Children {
		c.Walk(f)
	}
}

// Thread is the merged tree of one thread.
type Thread struct {
	PID, TID uint32
	Name     string
	Root     *Node
	stack    []*Node // event stack: stack[0] is Root
	last     uint64  // time of the thread's last event
	started  bool
	// the node the thread's last tick landed in, while an UNWIND record
	// of that tick may still follow
	lastTick *Node
	// the thread's events and ticks as they came; Finish replays them in
	// time order (records of one thread can reach the trace out of order:
	// an agent's batches, several CPUs)
	items []item
}

// item is one event or tick of a thread.
type item struct {
	time   uint64
	kind   uint8 // itemEnter, itemExit, itemTick
	name   string
	frames []string // a tick's call stack, root first (nil: none)
	// an event of a method not named yet when it was read: named by id
	// at Finish (its JIT_METHOD can come later in the merged trace: an
	// agent's batch reaches a CPU's buffer after records of later times)
	id   uint64
	byID bool
}

const (
	itemEnter = iota
	itemExit
	itemTick
)

func (t *Thread) cur() *Node { return t.stack[len(t.stack)-1] }

// Merger takes the records of a trace in time order.
type Merger struct {
	Threads []*Thread
	byTID   map[[2]uint32]*Thread
	names   map[[2]uint64]string // (pid, method id) -> name
	// IsInterpreter says whether a tick's name is the interpreter's code
	// (default: HotSpot's generated interpreter, named "Interpreter" by
	// the JVM's DynamicCodeGenerated event).
	IsInterpreter func(name string) bool
	// Problems are the records the merge could not use, counted by kind.
	Problems map[string]uint64
	Ticks    uint64 // ticks merged
	Events   uint64 // entry/exit events merged
}

// New returns an empty merger.
func New() *Merger {
	return &Merger{byTID: map[[2]uint32]*Thread{}, names: map[[2]uint64]string{}, Problems: map[string]uint64{},
		IsInterpreter: DefaultIsInterpreter}
}

// DefaultIsInterpreter is true for HotSpot's template interpreter (the
// code blob the JVM reports as "Interpreter") and PI's "I:" frames.
func DefaultIsInterpreter(name string) bool {
	return name == "Interpreter" || strings.HasPrefix(name, "Interpreter ") || strings.HasPrefix(name, "I:")
}

func (m *Merger) problem(format string, a ...any) { m.Problems[fmt.Sprintf(format, a...)]++ }

// Thread returns the tree of a thread, creating it.
func (m *Merger) Thread(pid, tid uint32) *Thread {
	k := [2]uint32{pid, tid}
	if t := m.byTID[k]; t != nil {
		return t
	}
	root := &Node{Name: RootName, Calls: 1, RL: 1}
	t := &Thread{PID: pid, TID: tid, Root: root, stack: []*Node{root}}
	m.byTID[k] = t
	m.Threads = append(m.Threads, t)
	return t
}

// MethodName names a method id of a process (JIT_METHOD records).
func (m *Merger) MethodName(pid uint32, id uint64, name string) {
	m.names[[2]uint64{uint64(pid), id}] = name
}

func (m *Merger) methodName(pid uint32, id uint64) string {
	if n, ok := m.names[[2]uint64{uint64(pid), id}]; ok {
		return n
	}
	return fmt.Sprintf("method@0x%x", id)
}

// charge gives the time since the thread's last event to its current node.
func (t *Thread) charge(now uint64) {
	if t.started && now > t.last {
		t.cur().Base += now - t.last
	}
	if !t.started || now > t.last {
		t.last = now
	}
	t.started = true
}

// Enter is a method entry of a thread at time now.
func (m *Merger) Enter(pid, tid uint32, now uint64, name string) {
	t := m.Thread(pid, tid)
	t.items = append(t.items, item{time: now, kind: itemEnter, name: name})
}

// Exit is a method exit of a thread at time now.
func (m *Merger) Exit(pid, tid uint32, now uint64, name string) {
	t := m.Thread(pid, tid)
	t.items = append(t.items, item{time: now, kind: itemExit, name: name})
}

// Tick is a tprof sample of a thread at time now; name is what its PC
// resolves to ("" when unknown).
func (m *Merger) Tick(pid, tid uint32, now uint64, name string) {
	t := m.Thread(pid, tid)
	t.items = append(t.items, item{time: now, kind: itemTick, name: name})
}

// Unwind is the call stack of the thread's last tick (names, the root
// first, the interrupted frame last).
func (m *Merger) Unwind(pid, tid uint32, frames []string) {
	t := m.Thread(pid, tid)
	if n := len(t.items); n > 0 && t.items[n-1].kind == itemTick && t.items[n-1].frames == nil {
		t.items[n-1].frames = frames
		return
	}
	m.problem("call stack with no tick of its thread before it (ignored)")
}

func (m *Merger) enter(t *Thread, now uint64, name string) {
	t.charge(now)
	c := t.cur().child(name, false)
	c.Calls++
	t.stack = append(t.stack, c)
	t.lastTick = nil
	m.Events++
}

// exit is a method exit. An exit of a method that is not on top repairs
// the stack: the frames above it are popped (their exits were not
// recorded, as when an exception unwinds them); an exit of a method not on
// the stack at all is counted as a problem and ignored.
func (m *Merger) exit(t *Thread, now uint64, name string) {
	t.charge(now)
	t.lastTick = nil
	m.Events++
	for i := len(t.stack) - 1; i > 0; i-- {
		if t.stack[i].Name == name && !t.stack[i].Sampled {
			if i != len(t.stack)-1 {
				m.problem("exit below the top of the stack: frames with no exit popped (an exception)")
			}
			t.stack = t.stack[:i]
			return
		}
	}
	m.problem("exit with no matching entry on its thread (ignored)")
}

// tick lands in the thread's current node when it is in that node's own
// code or in the interpreter, else in a sampled child.
func (m *Merger) tick(t *Thread, name string) {
	cur := t.cur()
	n := cur
	if name != "" && !m.IsInterpreter(name) && (cur == t.Root || name != cur.Name) {
		n = cur.child(name, true)
	}
	n.Ticks++
	t.lastTick = n
	m.Ticks++
}

// unwind moves the tick just merged by its call stack: when the
// interrupted frame is in the interpreter the tick stays with the
// interpreted method being run; otherwise the frames below the deepest
// frame that is on the thread's event stack hang below that event node
// (interpreter frames among them are left out: they are the event nodes'
// own methods), and the tick lands in the last of them.
func (m *Merger) unwind(t *Thread, frames []string) {
	n := t.lastTick
	t.lastTick = nil
	if len(frames) == 0 || m.IsInterpreter(frames[len(frames)-1]) {
		return
	}
	n.Ticks--
	at, from := t.Root, 0
	// the deepest event frame that the sample holds
	for i := len(t.stack) - 1; i > 0 && from == 0; i-- {
		for j := len(frames) - 1; j >= 0; j-- {
			if frames[j] == t.stack[i].Name {
				at, from = t.stack[i], j+1
				break
			}
		}
	}
	if at == t.Root && len(t.stack) > 1 {
		// No frame of the event stack in the sample (interpreted methods
		// show as interpreter frames): below the current node go the
		// frames below the last interpreter frame, which are what the
		// current method called; those above it are the thread's base
		// (start_thread ... call_stub), already stood for by the events.
		at = t.cur()
		for j := len(frames) - 1; j >= 0; j-- {
			if m.IsInterpreter(frames[j]) {
				from = j + 1
				break
			}
		}
	}
	for _, f := range frames[from:] {
		if m.IsInterpreter(f) {
			continue
		}
		at = at.child(f, true)
	}
	at.Ticks++
}

// Record takes one trace record. name resolves a tick's or a stack's PC
// of a process (nil: ticks are charged to the current node unnamed). An
// event record with an unknown minor code is an error naming the record;
// records of other kinds are not the merge's and are ignored.
func (m *Merger) Record(rec *trace.Record, name func(pid uint32, pc uint64, kernel bool) string) error {
	switch rec.Major {
	case trace.MajorInterp, trace.MajorJitted:
		if len(rec.Fixed) < 4 {
			return fmt.Errorf("merge: %s record at time %d has %d words, want pid, tid, method id (4)", trace.MajorName(rec.Major), rec.Time, len(rec.Fixed))
		}
		pid, tid := uint32(rec.Fixed[0]), uint32(rec.Fixed[1])
		id := rec.Fixed[2]&0xffffffff | rec.Fixed[3]<<32
		switch rec.Minor {
		case MinorEntry, MinorExit:
			kind := uint8(itemEnter)
			if rec.Minor == MinorExit {
				kind = itemExit
			}
			t := m.Thread(pid, tid)
			if n, ok := m.names[[2]uint64{uint64(pid), id}]; ok {
				t.items = append(t.items, item{time: rec.Time, kind: kind, name: n})
			} else {
				t.items = append(t.items, item{time: rec.Time, kind: kind, id: id, byID: true})
			}
		default:
			return fmt.Errorf("merge: unknown %s record minor 0x%x at time %d (want 0x%x entry or 0x%x exit)", trace.MajorName(rec.Major), rec.Minor, rec.Time, MinorEntry, MinorExit)
		}
	case trace.MajorJITLoad:
		if rec.Minor == trace.JITMethod {
			m.MethodName(uint32(rec.Field(0)), rec.Field(1), rec.Str)
		}
	case trace.MajorTprof:
		pid, tid := uint32(rec.Field(0)), uint32(rec.Field(1))
		n := ""
		if name != nil {
			n = name(pid, rec.Field(2), rec.Field(3)&trace.TprofKernel != 0)
		}
		m.Tick(pid, tid, rec.Time, n)
	case trace.MajorUnwind:
		if name == nil || rec.Minor != trace.UnwindTick {
			return nil
		}
		pid, tid, flags := uint32(rec.Field(0)), uint32(rec.Field(1)), rec.Field(2)
		n := len(rec.Str) / 8
		nk := int(flags >> trace.UnwindKernShift)
		frames := make([]string, 0, n)
		for i := n - 1; i >= 0; i-- { // root first
			pc := uint64(0)
			for b := 7; b >= 0; b-- {
				pc = pc<<8 | uint64(rec.Str[8*i+b])
			}
			if i > 0 && i != nk {
				pc-- // a return address: name the call
			}
			frames = append(frames, name(pid, pc, i < nk))
		}
		m.Unwind(pid, tid, frames)
	}
	return nil
}

// Finish merges each thread's events and ticks in time order (a tick at
// the time of an event keeps its record order) and computes the cumulative values.
// Call it once, after the last record.
func (m *Merger) Finish() {
	for _, t := range m.Threads {
		sort.SliceStable(t.items, func(i, j int) bool { return t.items[i].time < t.items[j].time })
		for _, it := range t.items {
			if it.byID {
				it.name = m.methodName(t.PID, it.id)
			}
			switch it.kind {
			case itemEnter:
				m.enter(t, it.time, it.name)
			case itemExit:
				m.exit(t, it.time, it.name)
			case itemTick:
				m.tick(t, it.name)
				if it.frames != nil {
					m.unwind(t, it.frames)
				}
			}
		}
		t.items = nil
	}
	for _, t := range m.Threads {
		var sum func(n *Node)
		sum = func(n *Node) {
			n.Cum, n.CumTicks = n.Base, n.Ticks
			for _, c := range n.Children {
				sum(c)
				n.Cum += c.Cum
				n.CumTicks += c.CumTicks
			}
		}
		sum(t.Root)
	}
}
