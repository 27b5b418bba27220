// Package continuous is pitraced's continuous profiling mode: system-wide
// tprof with call stacks from the agent's perf_event sampler
// (daemon/kevents), names resolved on the node by A2N, aggregated per
// interval and exported as OTLP profiles (daemon/otlpexport).
//
// The sampler's reader never waits on this package: its records go into a
// bounded channel (a full channel drops and counts them); one goroutine
// applies them to the name tables and counts stacks; each interval is
// turned into one OTLP request and queued for the exporter, which sends it
// on a goroutine of its own.
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
)

// event is one record handed from the sampler's reader to the aggregator.
type event struct {
	kind     eventKind
	minor    uint32 // MTE minor code
	t        uint64
	fields   [5]uint64
	nf       uint8
	str      string
	pid, tid uint32
	pcs      []uint64 // a sample's stack, leaf first (kernel frames first)
	kernel   int      // how many of pcs are kernel addresses
}

// tick is a sample whose stack may follow (kevents delivers the tick,
// then its stack, for one CPU).
type tick struct {
	t        uint64
	pid, tid uint32
	ip       uint64
	kernel   bool
}

// sink is the kevents.Sink of the agent.
type sink struct {
	ch      chan event
	mu      sync.Mutex
	pending map[int]tick
	dropped atomic.Uint64 // events the full channel could not take
	lost    atomic.Uint64 // records the kernel dropped (full rings)
	samples atomic.Uint64 // samples taken from the rings
}

func newSink(capacity int) *sink {
	return &sink{ch: make(chan event, capacity), pending: map[int]tick{}}
}

func (s *sink) put(e event) {
	select {
	case s.ch <- e:
	default:
		s.dropped.Add(1)
	}
}

// flushLocked sends cpu's pending tick without a stack. Caller holds mu.
func (s *sink) flushLocked(cpu int) {
	tk, ok := s.pending[cpu]
	if !ok {
		return
	}
	delete(s.pending, cpu)
	k := 0
	if tk.kernel {
		k = 1
	}
	s.put(event{kind: evSample, t: tk.t, pid: tk.pid, tid: tk.tid, pcs: []uint64{tk.ip}, kernel: k})
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
	s.mu.Unlock()
	s.put(event{kind: evSample, t: t, pid: pid, tid: tid, pcs: append([]uint64(nil), pcs...), kernel: kernel})
}

// SwitchStack: the continuous profile samples on-CPU time only (it opens
// no dispatch events), so no switch stacks reach it.
func (s *sink) SwitchStack(cpu int, t uint64, pid, tid uint32, pcs []uint64, kernel int, truncated, cfi bool) {
}

func (s *sink) MTE(cpu int, minor uint32, t uint64, fields []uint64, str string) {
	s.mu.Lock()
	s.flushLocked(cpu)
	s.mu.Unlock()
	e := event{kind: evMTE, minor: minor, t: t, str: str}
	e.nf = uint8(copy(e.fields[:], fields))
	s.put(e)
}

func (s *sink) Lost(cpu int, mte bool, n uint64) { s.lost.Add(n) }
