package facility

import (
	"encoding/binary"
	"errors"
	"fmt"

	"perfinsp/format/trace"
	"perfinsp/format/tracebuf"
	"perfinsp/libperfutil/control"
)

// JProf writes one record of the JVMTI agent (docs/jprof.md) from w into
// cpu's trace buffer at time t (w must hold the trace, or be root): JIT_LOAD, JIT_UNLOAD and JIT_METHOD (major
// trace.MajorJITLoad) name code and methods for the ticks, and are kept
// when tprof or the jit group is enabled; method entry/exit events (majors
// trace.MajorInterp and trace.MajorJitted, u32 words) are kept when their
// major is enabled. fields[0] must be the writing process (the op sets it
// from the peer's credentials). A record of a disabled major is dropped
// without an error; the result says whether it was written.
func (f *Facility) JProf(w Writer, cpu int, t uint64, major uint16, minor uint32, fields []uint64, str string) (bool, error) {
	var ok bool
	err := f.JProfBatch(w, cpu, func(b *JProfBatch) error {
		var err error
		ok, err = b.Put(t, major, minor, fields, str)
		return err
	})
	return ok, err
}

// JProfBatch writes one request's JProf records into a CPU's trace buffer
// (Facility.JProfBatch), each as JProf would.
type JProfBatch struct {
	f *Facility
	l *tracebuf.Locked // nil: tracing is not on
	// the majors kept, as the batch began
	keepJIT, keepInterp, keepJitted bool
	stopped                         bool   // a full buffer stopped tracing
	refused                         uint64 // records refused after stopped or while not on
}

var errNotOn = errors.New("tracing is not on")

// Put writes one record (JProf's rules): whether it was written, or why
// it cannot be.
func (b *JProfBatch) Put(t uint64, major uint16, minor uint32, fields []uint64, str string) (bool, error) {
	if b.l == nil || b.stopped {
		b.refused++
		return false, errNotOn
	}
	layout, keep, err := b.layout(major, minor, fields, str)
	if err != nil || !keep {
		return false, err
	}
	ok, err := b.l.Write(major, minor, layout, t, fields, str)
	b.wrote(ok, err)
	return ok, err
}

// EventSize is the size of a method entry/exit record: the header and 4
// words (pid, tid, the method id's low and high halves).
const EventSize = trace.HeaderSize + 16

// PutEvent writes one method entry/exit record as it is encoded (the
// agent's binary stream), at time t: EventSize bytes in the words layout,
// major trace.MajorInterp or trace.MajorJitted, its first word the writing
// process (the op sets it from the peer's credentials). It is kept as Put
// keeps a method event; the bytes are copied into the buffer as they are,
// with t's low half as the record's time stamp.
func (b *JProfBatch) PutEvent(rec []byte, t uint64) (bool, error) {
	if b.l == nil || b.stopped {
		b.refused++
		return false, errNotOn
	}
	keep, err := b.eventKept(rec)
	if err != nil || !keep {
		return false, err
	}
	ok, err := b.l.WriteRecord(rec, t)
	b.wrote(ok, err)
	return ok, err
}

// PutEvents writes a run of method events as PutEvent writes each: recs
// holds them back to back, each EventSize bytes, all of the time-high half
// of t (t is the first one's full time; each keeps its own time stamp).
// Those of the majors kept go in with a copy per run of them that fits a
// segment. It returns how many were written; the first record that is no
// method event ends the run with an error (those before it are written).
func (b *JProfBatch) PutEvents(recs []byte, t uint64) (int, error) {
	n := len(recs) / EventSize
	if b.l == nil || b.stopped {
		b.refused += uint64(n)
		return 0, errNotOn
	}
	var bad error
	if len(recs)%EventSize != 0 {
		bad = fmt.Errorf("%d bytes are not method events of %d bytes", len(recs), EventSize)
	}
	written := 0
	from := 0 // the start of the run of kept events not written yet
	flush := func(to int) error {
		if to == from {
			return nil
		}
		if b.stopped { // a full buffer stopped tracing: the rest are lost
			b.refused += uint64((to - from) / EventSize)
			return errNotOn
		}
		tm := t&^0xffffffff | uint64(binary.LittleEndian.Uint32(recs[from+8:]))
		k, err := b.l.WriteRecords(recs[from:to], EventSize, tm)
		written += k
		if k < (to-from)/EventSize {
			b.wrote(false, err)
		}
		if err == nil && b.stopped {
			err = errNotOn
		}
		return err
	}
	for off := 0; off+EventSize <= len(recs); off += EventSize {
		keep, err := b.eventKept(recs[off : off+EventSize])
		if err != nil {
			bad = err
			recs = recs[:off]
			break
		}
		if !keep {
			if err := flush(off); err != nil {
				if b.stopped { // the rest are lost, as Put counts them
					b.refused += uint64((len(recs) - off) / EventSize)
				}
				return written, err
			}
			from = off + EventSize
		}
	}
	if err := flush(len(recs) - len(recs)%EventSize); err != nil {
		return written, err
	}
	return written, bad
}

// eventKept checks rec is one method event: whether its major is kept.
func (b *JProfBatch) eventKept(rec []byte) (bool, error) {
	if len(rec) != EventSize || binary.LittleEndian.Uint16(rec) != eventTypeLen {
		return false, errors.New("a method event carries pid, tid and the method id as two words")
	}
	switch binary.LittleEndian.Uint16(rec[2:]) {
	case trace.MajorInterp:
		return b.keepInterp, nil
	case trace.MajorJitted:
		return b.keepJitted, nil
	}
	return false, fmt.Errorf("major 0x%x is not a method event", binary.LittleEndian.Uint16(rec[2:]))
}

var eventTypeLen = trace.TypeLen(trace.LayoutWords, EventSize)

// wrote notes a record the buffer refused: in normal mode a full buffer
// stops tracing, and the batch's later records are lost.
func (b *JProfBatch) wrote(ok bool, err error) {
	if !ok && err == nil && b.f.mode == control.ModeNormal && b.l.Full() {
		b.stopped = true
	}
}

// JProfBatch writes the records fn puts into cpu's trace buffer, as JProf
// writes each, with the facility's and the buffer's locks taken once for
// all of them (an agent's frame holds thousands of method events). The
// writer's right, the state and the majors enabled are checked once: fn's
// records are one request's. While tracing is not on (or past a record
// that stopped it: a full buffer) each put says so, and after a full
// buffer the records are counted lost. The result is fn's.
func (f *Facility) JProfBatch(w Writer, cpu int, fn func(b *JProfBatch) error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.mayWriteLocked(w); err != nil {
		return err
	}
	if cpu < 0 || cpu >= len(f.trace) {
		cpu = 0
	}
	f.deliverHeldLocked()
	jb := JProfBatch{f: f, keepJIT: f.enabled[trace.MajorJITLoad] || f.enabled[trace.MajorTprof],
		keepInterp: f.enabled[trace.MajorInterp], keepJitted: f.enabled[trace.MajorJitted]}
	if f.state != control.StateOn {
		err := fn(&jb)
		if f.full && len(f.trace) > 0 {
			// tracing stopped when a buffer filled: the records are lost,
			// and counted as lost like the ticks that did not fit
			f.trace[cpu].AddLost(jb.refused)
		}
		return err
	}
	buf := f.trace[cpu]
	var err error
	buf.Batch(func(l *tracebuf.Locked) {
		jb.l = l
		err = fn(&jb)
		jb.l = nil
	})
	if jb.stopped {
		buf.AddLost(jb.refused) // as the ticks that did not fit
		f.bufferFull()
	}
	return err
}

// layout is a JProf record's layout, and whether its major is kept.
func (b *JProfBatch) layout(major uint16, minor uint32, fields []uint64, str string) (int, bool, error) {
	switch major {
	case trace.MajorJITLoad:
		spec := trace.Lookup(major, minor)
		if spec == nil {
			return 0, false, fmt.Errorf("unknown JIT record minor %d", minor)
		}
		return spec.Layout, b.keepJIT, nil
	case trace.MajorInterp, trace.MajorJitted:
		if len(fields) != 4 || str != "" {
			return 0, false, errors.New("a method event carries pid, tid and the method id as two words")
		}
		return trace.LayoutWords, major == trace.MajorInterp && b.keepInterp || major == trace.MajorJitted && b.keepJitted, nil
	}
	return 0, false, fmt.Errorf("major 0x%x is not a JProf record", major)
}
