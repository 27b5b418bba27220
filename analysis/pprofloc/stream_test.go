package pprofloc

import (
	"bytes"
	"testing"

	"github.com/google/pprof/profile"
)

// TestStreamParses: a streamed profile parses back with its sample types,
// period, samples (stacks leaf first, values, string and number labels),
// one function and location per key, names and source lines.
func TestStreamParses(t *testing.T) {
	var buf bytes.Buffer
	s := NewStream(&buf, []ValueType{{"calls", "count"}, {"task-clock", "ns"}}, ValueType{"task-clock", "ns"}, 1)
	main := s.Loc("main\x00prog", "main", "prog.c", 10)
	f := s.Loc("f\x00prog", "f", "", 0)
	if s.Loc("main\x00prog", "other", "", 0) != main || main == f {
		t.Fatal("a key seen before must give its first location")
	}
	s.Sample([]uint64{main}, []int64{1, 300}, Label{Key: "thread", Str: "tid_7"})
	deep := []uint64{main}
	for i := 0; i < 1000; i++ {
		deep = append(deep, f)
	}
	s.Sample(deep, []int64{1000, 1 << 40}, Label{Key: "pid", Num: 7})
	p := closedProfile(t, s, &buf)
	if len(p.SampleType) != 2 || p.SampleType[1].Type != "task-clock" || p.SampleType[1].Unit != "ns" || p.PeriodType.Type != "task-clock" || p.Period != 1 {
		t.Fatalf("types %v %v %d", p.SampleType, p.PeriodType, p.Period)
	}
	if len(p.Function) != 2 || len(p.Location) != 2 || len(p.Sample) != 2 {
		t.Fatalf("%d functions, %d locations, %d samples", len(p.Function), len(p.Location), len(p.Sample))
	}
	s0, s1 := p.Sample[0], p.Sample[1]
	if len(s0.Location) != 1 || s0.Location[0].Line[0].Function.Name != "main" || s0.Location[0].Line[0].Function.Filename != "prog.c" ||
		s0.Location[0].Line[0].Function.StartLine != 10 || s0.Value[1] != 300 || s0.Label["thread"][0] != "tid_7" {
		t.Fatalf("sample 0: %v", s0)
	}
	if len(s1.Location) != 1001 || s1.Location[0].Line[0].Function.Name != "f" || s1.Location[1000].Line[0].Function.Name != "main" ||
		s1.Value[0] != 1000 || s1.Value[1] != 1<<40 || s1.NumLabel["pid"][0] != 7 {
		t.Fatalf("sample 1: %d locations, leaf %s, values %v, labels %v", len(s1.Location), s1.Location[0].Line[0].Function.Name, s1.Value, s1.NumLabel)
	}
}

// closedProfile closes s and parses what it wrote into buf as a valid
// profile.
func closedProfile(t *testing.T, s *Stream, buf *bytes.Buffer) *profile.Profile {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	p, err := profile.Parse(buf)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.CheckValid(); err != nil {
		t.Fatal(err)
	}
	return p
}
