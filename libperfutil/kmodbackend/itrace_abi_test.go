package kmodbackend

import (
	"reflect"
	"testing"

	"perfinsp/format/trace"
)

// The ITrace block of kmod/uapi/pitrace.h against the Go mirrors and the
// spec table: the ioctl structs field by field, the ABI-1 sizes, the
// constants, and every record payload the module writes against the
// record's fields in format/trace (the table post decodes with).
func TestITraceABIMatchesHeader(t *testing.T) {
	v := headerValues()
	for _, s := range []struct {
		c      string
		goType any
		fields []string
	}{
		{"pitrace_itrace_on", itraceOnArg{}, []string{"flags", "npids", "pids_from", "threads", "pids", "skipped", "reserved"}},
		{"pitrace_itrace_off", itraceOffArg{}, []string{"flags", "npids", "pids", "threads", "reserved", "instructions", "records"}},
		{"pitrace_itrace_stats", itraceStats{}, []string{"tid", "reserved", "instructions", "start_tsc", "end_tsc", "traps", "trap_tsc",
			"syscalls", "sys_tsc", "interrupts", "irq_tsc", "faults", "fault_tsc", "reps",
			"blocks", "disagreements", "block_traps", "refused", "step", "btf_ignored", "signals", "sig_tsc"}},
	} {
		typ := reflect.TypeOf(s.goType)
		if v["sizeof "+s.c] != uint64(typ.Size()) {
			t.Errorf("struct %s: C size %d, Go %d", s.c, v["sizeof "+s.c], typ.Size())
		}
		if typ.NumField() != len(s.fields) {
			t.Fatalf("struct %s: Go has %d fields, C %d", s.c, typ.NumField(), len(s.fields))
		}
		for i, f := range s.fields {
			off, ok := v["offsetof "+s.c+"."+f]
			if !ok || off != uint64(typ.Field(i).Offset) {
				t.Errorf("%s.%s: C offset %d (present %v), Go %d", s.c, f, off, ok, typ.Field(i).Offset)
			}
		}
	}
	for c, w := range map[string]uint64{
		"PITRACE_ITRACE_ON_SIZE_V1":  uint64(reflect.TypeOf(itraceOnArg{}).Size()),
		"PITRACE_ITRACE_OFF_SIZE_V1": uint64(reflect.TypeOf(itraceOffArg{}).Size()),
		"PITRACE_ITRACE_THREAD":      uint64(trace.ITraceThread), "PITRACE_ITRACE_START": uint64(trace.ITraceStart),
		"PITRACE_ITRACE_END": uint64(trace.ITraceEnd), "PITRACE_ITRACE_SYSCALL": uint64(trace.ITraceSyscall),
		"PITRACE_ITRACE_SIGNAL": uint64(trace.ITraceSignal), "PITRACE_ITRACE_START_EXEC": uint64(trace.ITraceStartExec),
		"PITRACE_ITRACE_SIG_HANDLER": uint64(trace.ITraceSignalHandler),
		"PITRACE_ITRACE_END_EXIT":    uint64(trace.ITraceEndExit), "PITRACE_ITRACE_END_OFF": uint64(trace.ITraceEndOff),
		"PITRACE_ITRACE_END_EXEC":  uint64(trace.ITraceEndExec),
		"PITRACE_ITRACE_INTERRUPT": uint64(trace.ITraceInterrupt), "PITRACE_ITRACE_FAULT": uint64(trace.ITraceFault),
	} {
		if got, ok := v[c]; !ok || got != w {
			t.Errorf("%s: header %#x (present %v), Go %#x", c, got, ok, w)
		}
	}
	if v["PITRACE_FEAT_ABI"]&featITrace == 0 || v["PITRACE_FEAT_ABI"]&featITraceKernel == 0 || v["PITRACE_FEAT_ABI"]&featITraceBlock == 0 {
		t.Errorf("PITRACE_FEAT_ABI %#x does not carry PITRACE_FEAT_ITRACE, _ITRACE_KERNEL and _ITRACE_BLOCK", v["PITRACE_FEAT_ABI"])
	}
	// a V1 caller of ITRACE_STATS gets the fields up to reps, whole
	if f, ok := reflect.TypeOf(itraceStats{}).FieldByName("Blocks"); !ok || uint64(f.Offset) != v["PITRACE_ITRACE_STATS_SIZE_V1"] {
		t.Errorf("itraceStats.Blocks at %d, want the first byte after the ABI-1 struct (%d)", f.Offset, v["PITRACE_ITRACE_STATS_SIZE_V1"])
	}
	payloads := []struct {
		minor uint32
		major uint16
		c     string
	}{
		{trace.ITraceCall, trace.MajorITraceU, "pitrace_rec_itrace_block"},
		{trace.ITraceJump, trace.MajorITraceU, "pitrace_rec_itrace_block"},
		{trace.ITraceReturn, trace.MajorITraceU, "pitrace_rec_itrace_block"},
		{trace.ITraceThread, trace.MajorITraceU, "pitrace_rec_itrace_thread"},
		{trace.ITraceStart, trace.MajorITraceU, "pitrace_rec_itrace_start"},
		{trace.ITraceEnd, trace.MajorITraceU, "pitrace_rec_itrace_end"},
		{trace.ITraceSyscall, trace.MajorITraceK, "pitrace_rec_itrace_syscall"},
		{trace.ITraceSignal, trace.MajorITraceK, "pitrace_rec_itrace_signal"},
		{trace.ITraceInterrupt, trace.MajorITraceK, "pitrace_rec_itrace_interrupt"},
		{trace.ITraceFault, trace.MajorITraceK, "pitrace_rec_itrace_fault"},
	}
	for _, p := range payloads {
		sp := trace.Lookup(p.major, p.minor)
		if sp == nil {
			t.Fatalf("major %#x minor %#x not in the spec table", p.major, p.minor)
		}
		off := uint64(0)
		for _, f := range sp.Fields {
			key := p.c + "." + f.Name
			cOff, ok := v["offsetof "+key]
			if !ok || cOff != off || v["fieldsize "+key] != uint64(f.Width) {
				t.Errorf("%s.%s: C offset %d width %d (present %v), spec offset %d width %d", sp.Name, f.Name, cOff, v["fieldsize "+key], ok, off, f.Width)
			}
			off += uint64(f.Width)
		}
		if v["sizeof "+p.c] != off {
			t.Errorf("%s: struct %s is %d bytes, the spec's fields %d", sp.Name, p.c, v["sizeof "+p.c], off)
		}
	}
}
