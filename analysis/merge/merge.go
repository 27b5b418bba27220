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
	// the child child returned last
	lastChild *Node
	Level     int
	RL        int  // how many nodes of this name are on the path, itself included
	Sampled   bool // created by a sample, not by an entry event
	Calls     uint64
	Base      uint64 // time while this node was current (trace clock)
	Cum       uint64 // Base of this node and everything below it
	Ticks     uint64 // ticks that landed in this node
	CumTicks  uint64 // Ticks of this node and everything below it
}

func (n *Node) child(name string, sampled bool) *Node {
	if c := n.lastChild; c != nil && c.Sampled == sampled && c.Name == name {
		return c // a loop calls one method again and again
	}
	c := n.findChild(name, sampled)
	n.lastChild = c
	return c
}

func (n *Node) findChild(name string, sampled bool) *Node {
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
	// the thread's events and ticks as they came, in blocks of at most
	// blockItems; Finish replays them in time order (records of one
	// thread can reach the trace out of order: an agent's batches,
	// several CPUs)
	blocks [][]item
	ticks  []tick // what each tick item refers to
}

// item is one event or tick of a thread: its time and what it refers to,
// 16 bytes with no pointer. A trace holds tens of millions of method
// events and all of them wait for Finish: kept with their names and call
// stacks they took several times the trace's size in memory, and the
// garbage collector scanned every one.
type item struct {
	time uint64
	ref  uint32 // kind<<refKindShift | index: a method (Merger.methods) or a tick (Thread.ticks)
}

const (
	itemEnter = iota
	itemExit
	itemTick

	refKindShift = 30
	refIndexMax  = 1<<refKindShift - 1

	// blockItems bounds a thread's blocks of items: the first grows to it
	// by doubling, the next ones are made whole (no copy of everything
	// before).
	blockItems = 1 << 20
)

func (it item) kind() uint32 { return it.ref >> refKindShift }
func (it item) index() int   { return int(it.ref & refIndexMax) }

// tick is a tick item's name and call stack (root first; nil: none).
type tick struct {
	name   string
	frames []string
}

// method is what an event item names: a method id of a process, with the
// name it had when the event was read (named), or to be named at Finish
// (its JIT_METHOD can come later in the merged trace: an agent's batch
// reaches a CPU's buffer after records of later times).
type method struct {
	pid   uint32
	id    uint64
	name  string
	named bool
}

func (t *Thread) cur() *Node { return t.stack[len(t.stack)-1] }

// Merger takes the records of a trace in time order.
type Merger struct {
	Threads []*Thread
	byTID   map[[2]uint32]*Thread
	// the thread of the last record
	lastThread *Thread
	names      map[[2]uint64]string // (pid, method id) -> its latest name
	methods    []method             // what event items refer to
	current    map[[2]uint64]uint32 // (pid, method id) -> its method now
	byName     map[string]uint32    // the methods of Enter and Exit (named by the caller)
	// IsInterpreter says whether a tick's name is the interpreter's code
	// (default: HotSpot's generated interpreter, named "Interpreter" by
	// the JVM's DynamicCodeGenerated event).
	IsInterpreter func(name string) bool
	// Problems are the records the merge could not use, counted by kind.
	Problems map[string]uint64
	Ticks    uint64 // ticks merged
	Events   uint64 // entry/exit events merged
	// Notes are lines the tree report prints under its totals.
	Notes []string
}

// New returns an empty merger.
func New() *Merger {
	return &Merger{byTID: map[[2]uint32]*Thread{}, names: map[[2]uint64]string{}, Problems: map[string]uint64{},
		current: map[[2]uint64]uint32{}, byName: map[string]uint32{}, IsInterpreter: DefaultIsInterpreter}
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
	if t := m.lastThread; t != nil && t.PID == pid && t.TID == tid {
		return t // records come in runs of one thread
	}
	if t := m.byTID[k]; t != nil {
		m.lastThread = t
		return t
	}
	root := &Node{Name: RootName, Calls: 1, RL: 1}
	t := &Thread{PID: pid, TID: tid, Root: root, stack: []*Node{root}}
	m.byTID[k] = t
	m.Threads = append(m.Threads, t)
	m.lastThread = t
	return t
}

// MethodName names a method id of a process (JIT_METHOD records): the
// name of its events read from now on, and of those read before that no
// name reached.
func (m *Merger) MethodName(pid uint32, id uint64, name string) {
	k := [2]uint64{uint64(pid), id}
	m.names[k] = name
	if i, ok := m.current[k]; ok && m.methods[i].named && m.methods[i].name == name {
		return
	}
	m.current[k] = uint32(len(m.methods))
	m.methods = append(m.methods, method{pid: pid, id: id, name: name, named: true})
}

func (m *Merger) methodName(pid uint32, id uint64) string {
	if n, ok := m.names[[2]uint64{uint64(pid), id}]; ok {
		return n
	}
	return fmt.Sprintf("method@0x%x", id)
}

// methodOf is the method an event of (pid, id) read now refers to.
func (m *Merger) methodOf(pid uint32, id uint64) uint32 {
	k := [2]uint64{uint64(pid), id}
	if i, ok := m.current[k]; ok {
		return i
	}
	i := uint32(len(m.methods))
	m.methods = append(m.methods, method{pid: pid, id: id})
	m.current[k] = i
	return i
}

// namedMethod is the method of Enter and Exit's name.
func (m *Merger) namedMethod(name string) uint32 {
	if i, ok := m.byName[name]; ok {
		return i
	}
	i := uint32(len(m.methods))
	m.methods = append(m.methods, method{name: name, named: true})
	m.byName[name] = i
	return i
}

// add appends an item to the thread's last block, or to a new one.
func (m *Merger) add(t *Thread, time uint64, kind uint32, index int) {
	if index > refIndexMax {
		m.problem("more than %d methods or ticks of a thread (the rest ignored)", refIndexMax+1)
		return
	}
	n := len(t.blocks)
	if n == 0 {
		t.blocks = append(t.blocks, make([]item, 0, 16))
		n++
	} else if len(t.blocks[n-1]) == blockItems {
		t.blocks = append(t.blocks, make([]item, 0, blockItems))
		n++
	}
	b := t.blocks[n-1]
	if len(b) == cap(b) {
		nb := make([]item, len(b), min(2*cap(b), blockItems))
		copy(nb, b)
		b = nb
	}
	t.blocks[n-1] = append(b, item{time: time, ref: kind<<refKindShift | uint32(index)})
}

// lastItem is the thread's newest item (nil: none).
func (t *Thread) lastItem() *item {
	if n := len(t.blocks); n > 0 {
		if b := t.blocks[n-1]; len(b) > 0 {
			return &b[len(b)-1]
		}
	}
	return nil
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
	m.add(m.Thread(pid, tid), now, itemEnter, int(m.namedMethod(name)))
}

// Exit is a method exit of a thread at time now.
func (m *Merger) Exit(pid, tid uint32, now uint64, name string) {
	m.add(m.Thread(pid, tid), now, itemExit, int(m.namedMethod(name)))
}

// Tick is a tprof sample of a thread at time now; name is what its PC
// resolves to ("" when unknown).
func (m *Merger) Tick(pid, tid uint32, now uint64, name string) {
	t := m.Thread(pid, tid)
	t.ticks = append(t.ticks, tick{name: name})
	m.add(t, now, itemTick, len(t.ticks)-1)
}

// Unwind is the call stack of the thread's last tick (names, the root
// first, the interrupted frame last).
func (m *Merger) Unwind(pid, tid uint32, frames []string) {
	t := m.Thread(pid, tid)
	if it := t.lastItem(); it != nil && it.kind() == itemTick && t.ticks[it.index()].frames == nil {
		t.ticks[it.index()].frames = frames
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
			kind := uint32(itemEnter)
			if rec.Minor == MinorExit {
				kind = itemExit
			}
			m.add(m.Thread(pid, tid), rec.Time, kind, int(m.methodOf(pid, id)))
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
	names := make([]string, len(m.methods))
	for i, me := range m.methods {
		names[i] = me.name
		if !me.named {
			names[i] = m.methodName(me.pid, me.id)
		}
	}
	for _, t := range m.Threads {
		t.replay(func(it item) {
			switch it.kind() {
			case itemEnter:
				m.enter(t, it.time, names[it.index()])
			case itemExit:
				m.exit(t, it.time, names[it.index()])
			case itemTick:
				tk := &t.ticks[it.index()]
				m.tick(t, tk.name)
				if tk.frames != nil {
					m.unwind(t, tk.frames)
				}
			}
		})
		t.blocks, t.ticks = nil, nil
	}
	m.methods = nil
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
