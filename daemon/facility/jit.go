package facility

import (
	"errors"
	"fmt"

	"perfinsp/format/trace"
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
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.mayWriteLocked(w); err != nil {
		return false, err
	}
	if f.state != control.StateOn {
		if f.full && cpu >= 0 && cpu < len(f.trace) {
			// tracing stopped when a buffer filled: the record is lost,
			// and counted as lost like the ticks that did not fit
			f.trace[cpu].AddLost(1)
		}
		return false, errors.New("tracing is not on")
	}
	layout := trace.LayoutWords
	switch major {
	case trace.MajorJITLoad:
		spec := trace.Lookup(major, minor)
		if spec == nil {
			return false, fmt.Errorf("unknown JIT record minor %d", minor)
		}
		if !f.enabled[trace.MajorJITLoad] && !f.enabled[trace.MajorTprof] {
			return false, nil
		}
		layout = spec.Layout
	case trace.MajorInterp, trace.MajorJitted:
		if !f.enabled[major] {
			return false, nil
		}
		if len(fields) != 4 || str != "" {
			return false, errors.New("a method event carries pid, tid and the method id as two words")
		}
	default:
		return false, fmt.Errorf("major 0x%x is not a JProf record", major)
	}
	if cpu < 0 || cpu >= len(f.trace) {
		cpu = 0
	}
	ok, err := f.trace[cpu].Write(major, minor, layout, t, fields, str)
	if !ok && err == nil && f.mode == control.ModeNormal && f.trace[cpu].Full() {
		f.bufferFull()
	}
	return ok, err
}
