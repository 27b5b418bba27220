package kmodbackend

import (
	"reflect"
	"testing"

	"perfinsp/format/trace"
)

// The JIT block of kmod/uapi/pitrace.h: the ioctl struct against its Go
// mirror, the constants against format/trace's codes, and each record
// payload the module writes against the spec table's fields (the layout
// pitraced writes for the same record, which post decodes).
func TestJITABIMatchesHeader(t *testing.T) {
	v := headerValues()
	typ := reflect.TypeOf(jitArg{})
	fields := []string{"minor", "name_len", "addr", "size", "name", "reserved"}
	if v["sizeof pitrace_jit_arg"] != uint64(typ.Size()) || uint64(typ.Size()) != v["PITRACE_JIT_ARG_SIZE_V1"] {
		t.Errorf("struct pitrace_jit_arg: C %d bytes, Go %d, V1 %d", v["sizeof pitrace_jit_arg"], typ.Size(), v["PITRACE_JIT_ARG_SIZE_V1"])
	}
	if typ.NumField() != len(fields) {
		t.Fatalf("pitrace_jit_arg: Go has %d fields, C %d", typ.NumField(), len(fields))
	}
	for i, f := range fields {
		off, ok := v["offsetof pitrace_jit_arg."+f]
		if !ok || off != uint64(typ.Field(i).Offset) {
			t.Errorf("pitrace_jit_arg.%s: C offset %d (present %v), Go %d", f, off, ok, typ.Field(i).Offset)
		}
	}
	for c, w := range map[string]uint64{
		"PITRACE_MAJOR_JITLOAD": uint64(trace.MajorJITLoad),
		"PITRACE_JIT_LOAD":      uint64(trace.JITLoad), "PITRACE_JIT_UNLOAD": uint64(trace.JITUnload),
		"PITRACE_JIT_METHOD": uint64(trace.JITMethod),
	} {
		if got, ok := v[c]; !ok || got != w {
			t.Errorf("%s: header %#x (present %v), Go %#x", c, got, ok, w)
		}
	}
	if v["PITRACE_FEAT_ABI"]&v["PITRACE_FEAT_JIT"] == 0 {
		t.Errorf("PITRACE_FEAT_ABI does not carry PITRACE_FEAT_JIT")
	}
	for _, p := range []struct {
		minor  uint32
		c      string
		layout int
	}{
		{trace.JITLoad, "pitrace_rec_jit_load", trace.LayoutString},
		{trace.JITUnload, "pitrace_rec_jit_unload", trace.LayoutFixed},
		{trace.JITMethod, "pitrace_rec_jit_method", trace.LayoutString},
	} {
		sp := trace.Lookup(trace.MajorJITLoad, p.minor)
		if sp == nil {
			t.Fatalf("JIT minor %d not in the spec table", p.minor)
		}
		if sp.Layout != p.layout {
			t.Errorf("%s: spec layout %d, the module writes %d", sp.Name, sp.Layout, p.layout)
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
