// Package continuous is pitraced's continuous profiling mode: system-wide
// tprof with call stacks from the agent's perf_event sampler
// (daemon/kevents), names resolved on the node by A2N, aggregated per
// interval and exported as OTLP profiles (daemon/otlpexport).
//
// The sampler's reader never waits on this package: its records go into a
// bounded batch (past the bound they are dropped and counted), which the
// aggregating goroutine takes a few times a second (one wake-up per batch,
// not per record); it applies them to the name tables and counts stacks;
// each interval is named and turned into one OTLP request, queued for the
// exporter, which sends it on a goroutine of its own.
package continuous

import (
	"sync"
	"sync/atomic"

	"perfinsp/format/trace"
)

type eventKind uint8

const (
	evMTE eventKind = iota
	evSample
	// evSwitch is a switch on a CPU (with Config.OffCPU): pid and tid
	// are the thread switched out (0: none that matters), fields[0:3]
	// the thread switched in's pid and tid (0: none) and the switched
	// out thread's prev_state.
	evSwitch
	// evWaitStack is the stack of a thread switched out to wait, at the
	// time of its switch (right after its evSwitch).
	evWaitStack
	// evIntr is a handler's time charged to the thread it interrupted
	// (with Config.Interrupts): minor trace.IntrHard or IntrSoft,
	// fields[0] the irq or vector, fields[1] the nanoseconds.
	evIntr
)

// event is one record handed from the sampler's reader to the aggregator.
// A sample's stack lies in the pcs of the batch (or reorder buffer) that
// holds the event: no allocation per sample.
type event struct {
	kind     eventKind
	nf       uint8  // MTE fields used
	kernel   uint16 // how many of the stack's pcs are kernel addresses
	minor    uint32 // MTE minor code
	pid, tid uint32
	pcOff    uint32 // the stack: pcs[pcOff : pcOff+pcN] (leaf first, kernel frames first)
	pcN      uint32
	t        uint64
	fields   [5]uint64
	str      string
}

// batch is a run of events and the stacks they point into.
type batch struct {
	evs []event
	pcs []uint64
}

func (b *batch) stack(e *event) []uint64 { return b.pcs[e.pcOff : e.pcOff+e.pcN] }

func (b *batch) reset() { clear(b.evs); b.evs, b.pcs = b.evs[:0], b.pcs[:0] }

// tick is a sample whose stack may follow (kevents delivers the tick,
// then its stack, for one CPU).
type tick struct {
	t        uint64
	pid, tid uint32
	ip       uint64
	kernel   bool
}

// maxFramesPerEvent bounds the frames a full batch holds on average: a
// batch of n events holds at most n*maxFramesPerEvent program counters.
const maxFramesPerEvent = 32

// sink is the kevents.Sink of the agent.
type sink struct {
	mu      sync.Mutex
	cur     batch
	max     int // events the batch holds; past it they are dropped
	pending map[int]tick
	// notify gets a token when the batch passes a quarter of its bound:
	// the aggregator takes it then rather than at its next period.
	notify  chan struct{}
	dropped atomic.Uint64 // events the full batch could not take
	lost    atomic.Uint64 // records the kernel dropped (full rings)
	samples atomic.Uint64 // samples taken from the rings
	// intr follows the CPUs' threads and handlers (Config.Interrupts;
	// nil: interrupt records are not asked for).
	intr *intrTracker
	// noWaits: the switch records are there for intr alone, not for
	// off-CPU time.
	noWaits bool
	// lastIntr is, per CPU, the index in cur of its last evIntr: a
	// handler of the same thread that ends next on the CPU adds to it
	// (a flood of softirqs costs one event per run of them, not each).
	lastIntr map[int]int
}

func newSink(capacity int) *sink {
	return &sink{max: capacity, pending: map[int]tick{}, notify: make(chan struct{}, 1), lastIntr: map[int]int{}}
}

// take hands the waiting events to the caller in b (emptied first) and
// keeps b's memory for the next ones.
func (s *sink) take(b *batch) {
	b.reset()
	s.mu.Lock()
	s.cur, *b = *b, s.cur
	clear(s.lastIntr)
	s.mu.Unlock()
}

// putLocked queues e with the stack pcs (nil for none). Caller holds mu.
func (s *sink) putLocked(e event, pcs []uint64) {
	b := &s.cur
	if len(b.evs) >= s.max || len(b.pcs)+len(pcs) > s.max*maxFramesPerEvent {
		s.dropped.Add(1)
		return
	}
	e.pcOff, e.pcN = uint32(len(b.pcs)), uint32(len(pcs))
	quarter := s.max * maxFramesPerEvent / 4
	crossed := len(b.evs) == s.max/4 || len(b.pcs) < quarter && len(b.pcs)+len(pcs) >= quarter
	b.pcs = append(b.pcs, pcs...)
	b.evs = append(b.evs, e)
	if crossed {
		select {
		case s.notify <- struct{}{}:
		default:
		}
	}
}

// flushLocked sends cpu's pending tick without a stack. Caller holds mu.
func (s *sink) flushLocked(cpu int) {
	tk, ok := s.pending[cpu]
	if !ok {
		return
	}
	delete(s.pending, cpu)
	var k uint16
	if tk.kernel {
		k = 1
	}
	ip := [1]uint64{tk.ip}
	s.putLocked(event{kind: evSample, t: tk.t, pid: tk.pid, tid: tk.tid, kernel: k}, ip[:])
}

// flushAll sends every pending tick (at the end of a session).
func (s *sink) flushAll() {
	s.mu.Lock()
	for cpu := range s.pending {
		s.flushLocked(cpu)
	}
	s.mu.Unlock()
}

func (s *sink) Trace(cpu int, major uint16, minor uint32, t uint64, fields []uint64) {
	if major == trace.MajorDispatch && minor == trace.DispatchSwitch && len(fields) >= 5 {
		s.dispatch(cpu, t, fields)
		return
	}
	if major == trace.MajorInterrupt && len(fields) >= 1 {
		s.interrupt(cpu, t, minor, uint32(fields[0]))
		return
	}
	if major != trace.MajorTprof || (minor != trace.TprofTick && minor != trace.TprofEvent) || len(fields) < 4 {
		return
	}
	s.samples.Add(1)
	s.mu.Lock()
	s.flushLocked(cpu)
	s.pending[cpu] = tick{t: t, pid: uint32(fields[0]), tid: uint32(fields[1]), ip: fields[2], kernel: fields[3]&trace.TprofKernel != 0}
	s.mu.Unlock()
}

func (s *sink) Stack(cpu int, t uint64, pid, tid uint32, pcs []uint64, kernel int, truncated, cfi bool) {
	s.mu.Lock()
	if tk, ok := s.pending[cpu]; ok && tk.t == t {
		delete(s.pending, cpu)
	} else {
		s.flushLocked(cpu)
	}
	s.putLocked(event{kind: evSample, t: t, pid: pid, tid: tid, kernel: uint16(min(kernel, len(pcs)))}, pcs)
	s.mu.Unlock()
}

// offCPUStates are the prev_state bits of a switch-out whose time off the
// CPU is counted: sleeping (S) and blocked (D). An idle kernel thread (I),
// a parked or stopped one waits for no work of its own.
const offCPUStates = trace.StateSleeping | trace.StateBlocked

// dispatch queues a switch (DISPATCH's fields: prev pid, tid, next pid,
// tid, prev_state) when it begins or may end a wait: a switch from a
// thread preempted to the idle task matters to no one.
func (s *sink) dispatch(cpu int, t uint64, f []uint64) {
	if s.intr != nil {
		s.mu.Lock()
		s.intr.switched(cpu, uint32(f[2]), uint32(f[3]))
		s.mu.Unlock()
		if s.noWaits {
			return
		}
	}
	prevPid, prev, state := f[0], f[1], f[4]
	if state&offCPUStates == 0 {
		prevPid, prev = 0, 0
	}
	if prev == 0 && f[3] == 0 {
		return
	}
	s.mu.Lock()
	s.flushLocked(cpu)
	s.putLocked(event{kind: evSwitch, t: t, pid: uint32(prevPid), tid: uint32(prev), nf: 3, fields: [5]uint64{f[2], f[3], state}}, nil)
	s.mu.Unlock()
}

// interrupt applies a handler's entry or exit (Config.Interrupts) and
// queues the time of a handler that ended.
func (s *sink) interrupt(cpu int, t uint64, minor, vec uint32) {
	if s.intr == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, ok := s.intr.record(cpu, t, minor, vec)
	if !ok {
		return
	}
	s.flushLocked(cpu)
	if i, ok := s.lastIntr[cpu]; ok {
		if e := &s.cur.evs[i]; e.pid == ch.pid && e.tid == ch.tid && e.minor == ch.minor && e.fields[0] == uint64(ch.vec) {
			e.fields[1] += ch.ns
			e.t = t
			return
		}
	}
	n := len(s.cur.evs)
	s.putLocked(event{kind: evIntr, t: t, pid: ch.pid, tid: ch.tid, minor: ch.minor, nf: 2, fields: [5]uint64{uint64(ch.vec), ch.ns}}, nil)
	if len(s.cur.evs) > n {
		s.lastIntr[cpu] = n
	}
}

// SwitchStack is the stack of a thread switched out to wait (with
// Config.OffCPU): the off-CPU time of the wait is counted under it.
func (s *sink) SwitchStack(cpu int, t uint64, pid, tid uint32, pcs []uint64, kernel int, truncated, cfi bool) {
	s.mu.Lock()
	s.flushLocked(cpu)
	s.putLocked(event{kind: evWaitStack, t: t, pid: pid, tid: tid, kernel: uint16(min(kernel, len(pcs)))}, pcs)
	s.mu.Unlock()
}

func (s *sink) MTE(cpu int, minor uint32, t uint64, fields []uint64, str string) {
	e := event{kind: evMTE, minor: minor, t: t, str: str}
	e.nf = uint8(copy(e.fields[:], fields))
	s.mu.Lock()
	s.flushLocked(cpu)
	s.putLocked(e, nil)
	s.mu.Unlock()
}

func (s *sink) Lost(cpu int, mte bool, n uint64) { s.lost.Add(n) }
