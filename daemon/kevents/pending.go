package kevents

import (
	"sync"
	"time"
)

// Samples that wait for a table (--unwind dwarf). A sample (a tprof tick's
// stack, or the stack of a thread switched out to wait) whose unwinding
// meets a file whose call-frame table is still loading (a library the
// process has just mapped, dlopen) is not written cut: its registers and
// stack copy wait in its CPU's queue and are unwound again once the table
// is there (each drain of the rings retries, at least every 100 ms). While
// a CPU's queue holds a sample, every later record of that CPU's trace
// buffer waits behind it, so each buffer stays in time order. The wait is
// bounded: a sample waits at most maxPendingWait, and the samples' copies
// take at most maxPendingBytes; past either a stack is unwound as far as
// the tables allow and written marked truncated (UnwindStats.Cut). A
// sample is unwound with its process's mappings as they were when it was
// taken: an exec while it waits does not change them.

const (
	maxPendingWait  = 5 * time.Second
	maxPendingBytes = 16 << 20
)

// pendItem is one record held in a CPU's queue: a trace record, a stack
// ready to write, or a sample to unwind (raw set).
type pendItem struct {
	major  uint16
	minor  uint32
	t      uint64
	fields []uint64

	stack     bool
	switched  bool // a switch-out stack (written by SwitchStack, not Stack)
	pid, tid  uint32
	pcs       []uint64 // ready: the whole stack; raw: its kernel frames
	kernel    int
	truncated bool
	cfi       bool
	fp        []uint64  // raw: the frame-pointer walk of its user part
	raw       []byte    // registers and stack copy (PERF_SAMPLE_REGS_USER onwards)
	max       int       // user frames wanted
	maps      *procMaps // raw: the process's mappings at the sample (an exec may replace them)
	queued    time.Time
}

type pendCPU struct {
	mu    sync.Mutex
	items []pendItem
}

// pendingSink is the session's Sink with --unwind dwarf: it writes each
// CPU's records in order, holding those that follow a waiting sample.
type pendingSink struct {
	Sink
	uw    *userUnwinder
	mu    sync.Mutex // cpus, bytes
	cpus  map[int]*pendCPU
	bytes int
}

func newPendingSink(inner Sink, uw *userUnwinder) *pendingSink {
	return &pendingSink{Sink: inner, uw: uw, cpus: map[int]*pendCPU{}}
}

func (p *pendingSink) cpu(cpu int) *pendCPU {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.cpus[cpu]
	if c == nil {
		c = &pendCPU{}
		p.cpus[cpu] = c
	}
	return c
}

// Trace writes the record, or queues it behind cpu's waiting samples.
func (p *pendingSink) Trace(cpu int, major uint16, minor uint32, t uint64, fields []uint64) {
	c := p.cpu(cpu)
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.items) == 0 {
		p.Sink.Trace(cpu, major, minor, t, fields)
		return
	}
	c.items = append(c.items, pendItem{major: major, minor: minor, t: t, fields: append([]uint64(nil), fields...)})
}

// SwitchStack writes the stack of a thread switched out to wait, or queues
// it behind cpu's waiting samples: it must follow its DISPATCH record,
// which Trace may have queued.
func (p *pendingSink) SwitchStack(cpu int, t uint64, pid, tid uint32, pcs []uint64, kernel int, truncated, cfi bool) {
	c := p.cpu(cpu)
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.items) == 0 {
		p.Sink.SwitchStack(cpu, t, pid, tid, pcs, kernel, truncated, cfi)
		return
	}
	c.items = append(c.items, pendItem{stack: true, switched: true, t: t, pid: pid, tid: tid, pcs: append([]uint64(nil), pcs...), kernel: kernel, truncated: truncated, cfi: cfi})
}

// Stack writes the stack, or queues it behind cpu's waiting samples.
func (p *pendingSink) Stack(cpu int, t uint64, pid, tid uint32, pcs []uint64, kernel int, truncated, cfi bool) {
	c := p.cpu(cpu)
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.items) == 0 {
		p.Sink.Stack(cpu, t, pid, tid, pcs, kernel, truncated, cfi)
		return
	}
	c.items = append(c.items, pendItem{stack: true, t: t, pid: pid, tid: tid, pcs: append([]uint64(nil), pcs...), kernel: kernel, truncated: truncated, cfi: cfi})
}

// userStack unwinds a sample's user stack (kernel: its kernel frames; fp:
// the frame-pointer walk of its user frames; raw: registers and stack
// copy) and writes it, or queues it when a table it needs is loading.
// switched: the stack of a thread switched out to wait (SwitchStack),
// else a tprof sample's (Stack).
func (p *pendingSink) userStack(cpu int, t uint64, pid, tid uint32, kernel, fp []uint64, raw []byte, max int, truncated, switched bool) {
	c := p.cpu(cpu)
	c.mu.Lock()
	defer c.mu.Unlock()
	var maps *procMaps
	if len(c.items) == 0 {
		pcs, cut, cfi, _, wait := p.unwind(pid, tid, kernel, fp, raw, max, truncated, false, &maps)
		if !wait {
			p.write(cpu, switched, t, pid, tid, pcs, len(kernel), cut, cfi)
			return
		}
	}
	p.mu.Lock()
	full := p.bytes+len(raw) > maxPendingBytes
	if !full {
		p.bytes += len(raw)
	}
	p.mu.Unlock()
	if full {
		pcs, cut, cfi, _, _ := p.unwind(pid, tid, kernel, fp, raw, max, truncated, true, &maps)
		c.items = append(c.items, pendItem{stack: true, switched: switched, t: t, pid: pid, tid: tid, pcs: append([]uint64(nil), pcs...), kernel: len(kernel), truncated: cut, cfi: cfi})
		return
	}
	c.items = append(c.items, pendItem{stack: true, switched: switched, t: t, pid: pid, tid: tid, pcs: append([]uint64(nil), kernel...),
		fp: append([]uint64(nil), fp...), raw: append([]byte(nil), raw...), max: max, truncated: truncated, maps: maps, queued: time.Now()})
	p.uw.waiting(1, false)
}

// write writes a stack: a wait's (switched) or a tprof sample's.
func (p *pendingSink) write(cpu int, switched bool, t uint64, pid, tid uint32, pcs []uint64, kernel int, truncated, cfi bool) {
	if switched {
		p.Sink.SwitchStack(cpu, t, pid, tid, pcs, kernel, truncated, cfi)
	} else {
		p.Sink.Stack(cpu, t, pid, tid, pcs, kernel, truncated, cfi)
	}
}

// unwind returns the stack of a sample: its kernel frames, then its user
// frames (by call-frame information, or the frame-pointer walk when the
// sample has no user registers: user false). wait is true when a table it
// needs is loading (never with force); cfi whether the user frames are by
// call-frame information.
func (p *pendingSink) unwind(pid, tid uint32, kernel, fp []uint64, raw []byte, max int, truncated, force bool, maps **procMaps) (pcs []uint64, cut, cfi, user, wait bool) {
	pcs = append([]uint64(nil), kernel...)
	out, cut, cfi, ok, wait := p.uw.unwindSample(pid, raw, pcs, fp, max, force, maps)
	if wait {
		return nil, false, false, true, true
	}
	if !ok {
		return append(pcs, fp...), truncated, false, false, false
	}
	return out, cut, cfi, true, false
}

// retry writes what each CPU's queue can write now: its records up to the
// first sample still waiting for a table; with force, everything.
func (p *pendingSink) retry(force bool) {
	p.mu.Lock()
	cpus := make(map[int]*pendCPU, len(p.cpus))
	for k, v := range p.cpus {
		cpus[k] = v
	}
	p.mu.Unlock()
	for cpu, c := range cpus {
		c.mu.Lock()
		p.flush(cpu, c, force)
		c.mu.Unlock()
	}
}

// flush writes c's items in order up to the first that must wait.
func (p *pendingSink) flush(cpu int, c *pendCPU, force bool) {
	n := 0
	for ; n < len(c.items); n++ {
		it := &c.items[n]
		switch {
		case !it.stack:
			p.Sink.Trace(cpu, it.major, it.minor, it.t, it.fields)
		case it.raw == nil:
			p.write(cpu, it.switched, it.t, it.pid, it.tid, it.pcs, it.kernel, it.truncated, it.cfi)
		default:
			late := force || time.Since(it.queued) > maxPendingWait
			pcs, cut, cfi, user, wait := p.unwind(it.pid, it.tid, it.pcs, it.fp, it.raw, it.max, it.truncated, late, &it.maps)
			if wait {
				c.items = c.items[n:]
				return
			}
			p.write(cpu, it.switched, it.t, it.pid, it.tid, pcs, len(it.pcs), cut, cfi)
			p.mu.Lock()
			p.bytes -= len(it.raw)
			p.mu.Unlock()
			p.uw.waiting(-1, user)
		}
		c.items[n] = pendItem{}
	}
	c.items = c.items[:0]
}

// flushPending writes the samples waiting for a table once their tables
// are there, or as they are after maxPendingWait.
func (s *Session) flushPending() {
	if s.pend == nil {
		return
	}
	deadline := time.Now().Add(maxPendingWait)
	for s.pend.pending() > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // the loaders' progress
		s.pend.retry(false)
	}
	s.pend.retry(true)
}

// heldSince is the time of the oldest record held in a CPU's queue (ok
// false when none is held): records stamped from then on may still be
// written, however late.
func (p *pendingSink) heldSince() (t uint64, ok bool) {
	p.mu.Lock()
	cpus := make([]*pendCPU, 0, len(p.cpus))
	for _, c := range p.cpus {
		cpus = append(cpus, c)
	}
	p.mu.Unlock()
	for _, c := range cpus {
		c.mu.Lock()
		if len(c.items) > 0 && (!ok || c.items[0].t < t) {
			t, ok = c.items[0].t, true
		}
		c.mu.Unlock()
	}
	return t, ok
}

// pending is how many samples wait for a table.
func (p *pendingSink) pending() int {
	return p.uw.Stats().Waiting
}
