package kmodbackend

import (
	"reflect"
	"testing"

	"perfinsp/analysis/merge"
	"perfinsp/format/trace"
)

// The METHOD block of kmod/uapi/pitrace.h: the ioctl struct against its Go
// mirror, the majors and minors against format/trace's and the merge's
// codes, and the record payload against what the merge reads (pitraced
// writes the same four u32 words: pid, tid, id low, id high).
func TestMethodABIMatchesHeader(t *testing.T) {
	v := headerValues()
	typ := reflect.TypeOf(methodArg{})
	fields := []string{"major", "reserved", "minor", "id", "reserved2"}
	if v["sizeof pitrace_method_arg"] != uint64(typ.Size()) || v["PITRACE_METHOD_ARG_SIZE_V1"] != uint64(typ.Size()) {
		t.Errorf("struct pitrace_method_arg: C %d bytes (V1 %d), Go %d", v["sizeof pitrace_method_arg"], v["PITRACE_METHOD_ARG_SIZE_V1"], typ.Size())
	}
	if typ.NumField() != len(fields) {
		t.Fatalf("pitrace_method_arg: Go has %d fields, C %d", typ.NumField(), len(fields))
	}
	for i, f := range fields {
		off, ok := v["offsetof pitrace_method_arg."+f]
		if !ok || off != uint64(typ.Field(i).Offset) || v["fieldsize pitrace_method_arg."+f] != uint64(typ.Field(i).Type.Size()) {
			t.Errorf("pitrace_method_arg.%s: C offset %d width %d (present %v), Go offset %d width %d", f, off, v["fieldsize pitrace_method_arg."+f], ok, typ.Field(i).Offset, typ.Field(i).Type.Size())
		}
	}
	for c, w := range map[string]uint64{
		"PITRACE_MAJOR_INTERP": uint64(trace.MajorInterp), "PITRACE_MAJOR_JITTED": uint64(trace.MajorJitted),
		"PITRACE_METHOD_ENTRY": uint64(merge.MinorEntry), "PITRACE_METHOD_EXIT": uint64(merge.MinorExit),
	} {
		if got, ok := v[c]; !ok || got != w {
			t.Errorf("%s: header %#x (present %v), Go %#x", c, got, ok, w)
		}
	}
	if v["PITRACE_FEAT_ABI"]&v["PITRACE_FEAT_METHOD"] == 0 {
		t.Errorf("PITRACE_FEAT_ABI does not carry PITRACE_FEAT_METHOD")
	}
	// the payload: u32 words in the merge's order, nothing else
	for i, f := range []string{"pid", "tid", "id_lo", "id_hi"} {
		key := "pitrace_rec_method." + f
		if off, ok := v["offsetof "+key]; !ok || off != uint64(4*i) || v["fieldsize "+key] != 4 {
			t.Errorf("%s: C offset %d width %d (present %v), want word %d", key, off, v["fieldsize "+key], ok, i)
		}
	}
	if v["sizeof pitrace_rec_method"] != 4*4 {
		t.Errorf("struct pitrace_rec_method is %d bytes, want 4 u32 words", v["sizeof pitrace_rec_method"])
	}
}
