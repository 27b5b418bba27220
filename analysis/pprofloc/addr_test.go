package pprofloc

import (
	"bytes"
	"testing"
)

// TestStreamAddresses: locations at addresses of mappings parse back with
// their mapping (range, offset, file, build id), address, function and
// line, beside Loc's locations with none; a function is shared by key.
func TestStreamAddresses(t *testing.T) {
	var buf bytes.Buffer
	s := NewStream(&buf, []ValueType{{"instructions", "count"}}, ValueType{"instructions", "count"}, 1)
	main := s.Loc("main", "main", "prog.c", 10)
	m := s.Mapping("/bin/prog", "abcd", 0x1000, 0x3000, 0x1000)
	if s.Mapping("/bin/prog", "abcd", 0x1000, 0x3000, 0x1000) != m || s.Mapping("/lib/x.so", "", 0x1000, 0x3000, 0x1000) == m {
		t.Fatal("a mapping seen before must give its first ID, another a new one")
	}
	f := s.Func("f", "f", "prog.c", 20)
	a := s.AddrLoc(m, 0x1234, f, 22)
	b := s.AddrLoc(m, 0x1238, f, 23)
	site := s.AddrLoc(m, 0x1100, s.Func("main", "other", "", 0), 12)
	if s.AddrLoc(m, 0x1234, f, 22) != a || a == b {
		t.Fatal("an address seen before must give its first location")
	}
	s.Sample([]uint64{site, a}, []int64{5})
	s.Sample([]uint64{site, b}, []int64{7})
	s.Sample([]uint64{main}, []int64{1})
	p := closedProfile(t, s, &buf)
	if len(p.Mapping) != 2 || len(p.Function) != 2 || len(p.Location) != 4 {
		t.Fatalf("%d mappings, %d functions, %d locations", len(p.Mapping), len(p.Function), len(p.Location))
	}
	pm := p.Mapping[0]
	if pm.File != "/bin/prog" || pm.BuildID != "abcd" || pm.Start != 0x1000 || pm.Limit != 0x3000 || pm.Offset != 0x1000 || !pm.HasFunctions || !pm.HasLineNumbers {
		t.Fatalf("mapping %+v", pm)
	}
	l0 := p.Sample[0].Location
	if l0[0].Address != 0x1234 || l0[0].Mapping != pm || l0[0].Line[0].Line != 22 || l0[0].Line[0].Function.Name != "f" ||
		l0[1].Address != 0x1100 || l0[1].Line[0].Function.Name != "main" || l0[1].Line[0].Line != 12 {
		t.Fatalf("sample 0: %v", p.Sample[0])
	}
	if l := p.Sample[2].Location[0]; l.Mapping != nil || l.Address != 0 || l.Line[0].Function != l0[1].Line[0].Function {
		t.Fatalf("Loc's location: %+v, want main's function with no address", l)
	}
}
