package facility

import (
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
	err := f.JProfBatch(w, cpu, func(put JProfPut) error {
		var err error
		ok, err = put(t, major, minor, fields, str)
		return err
	})
	return ok, err
}

// JProfPut writes one JProf record of a batch (JProf's rules): whether it
// was written, or why it cannot be.
type JProfPut func(t uint64, major uint16, minor uint32, fields []uint64, str string) (bool, error)

// JProfBatch writes the records fn puts into cpu's trace buffer, as JProf
// writes each, with the facility's and the buffer's locks taken once for
// all of them (an agent's frame holds thousands of method events). The
// writer's right and the state are checked once: fn's records are one
// request's. While tracing is not on (or past a record that stopped it:
// a full buffer) each put says so, and after a full buffer the records
// are counted lost. The result is fn's.
func (f *Facility) JProfBatch(w Writer, cpu int, fn func(put JProfPut) error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.mayWriteLocked(w); err != nil {
		return err
	}
	if cpu < 0 || cpu >= len(f.trace) {
		cpu = 0
	}
	if f.state != control.StateOn {
		n := 0
		err := fn(func(uint64, uint16, uint32, []uint64, string) (bool, error) {
			n++
			return false, errors.New("tracing is not on")
		})
		if f.full && len(f.trace) > 0 {
			// tracing stopped when a buffer filled: the records are lost,
			// and counted as lost like the ticks that did not fit
			f.trace[cpu].AddLost(uint64(n))
		}
		return err
	}
	b := f.trace[cpu]
	var err error
	stopped, after := false, uint64(0)
	b.Batch(func(l *tracebuf.Locked) {
		err = fn(func(t uint64, major uint16, minor uint32, fields []uint64, str string) (bool, error) {
			if stopped {
				after++
				return false, errors.New("tracing is not on")
			}
			layout, keep, err := f.jprofLayout(major, minor, fields, str)
			if err != nil || !keep {
				return false, err
			}
			ok, err := l.Write(major, minor, layout, t, fields, str)
			if !ok && err == nil && f.mode == control.ModeNormal && l.Full() {
				stopped = true
			}
			return ok, err
		})
	})
	if stopped {
		b.AddLost(after) // as the ticks that did not fit
		f.bufferFull()
	}
	return err
}

// jprofLayout is a JProf record's layout, and whether its major is kept.
func (f *Facility) jprofLayout(major uint16, minor uint32, fields []uint64, str string) (int, bool, error) {
	switch major {
	case trace.MajorJITLoad:
		spec := trace.Lookup(major, minor)
		if spec == nil {
			return 0, false, fmt.Errorf("unknown JIT record minor %d", minor)
		}
		return spec.Layout, f.enabled[trace.MajorJITLoad] || f.enabled[trace.MajorTprof], nil
	case trace.MajorInterp, trace.MajorJitted:
		if len(fields) != 4 || str != "" {
			return 0, false, errors.New("a method event carries pid, tid and the method id as two words")
		}
		return trace.LayoutWords, f.enabled[major], nil
	}
	return 0, false, fmt.Errorf("major 0x%x is not a JProf record", major)
}
