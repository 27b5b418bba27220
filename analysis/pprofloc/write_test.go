package pprofloc

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/google/pprof/profile"
)

// A profile of every field profile.proto has that Write writes: what
// profile.Parse reads back from Write is what it reads back from
// profile.Write.
func TestWriteIsProfileWrite(t *testing.T) {
	m1 := &profile.Mapping{ID: 1, Start: 0x400000, Limit: 0x500000, Offset: 0x1000, File: "/bin/prog", BuildID: "abcd", HasFunctions: true, HasFilenames: true, HasLineNumbers: true, HasInlineFrames: true}
	m2 := &profile.Mapping{ID: 2, File: "[kernel]"}
	f1 := &profile.Function{ID: 1, Name: "main", SystemName: "main", Filename: "/src/prog.c", StartLine: 10}
	f2 := &profile.Function{ID: 2, Name: "inl", SystemName: "_Z3inlv", Filename: "/src/prog.h", StartLine: 3}
	f3 := &profile.Function{ID: 3, Name: "schedule", SystemName: "schedule"}
	l1 := &profile.Location{ID: 1, Mapping: m1, Address: 0x401234, Line: []profile.Line{{Function: f2, Line: 4, Column: 7}, {Function: f1, Line: 12}}}
	l2 := &profile.Location{ID: 2, Mapping: m1, Address: 0x401000, Line: []profile.Line{{Function: f1, Line: 10}}, IsFolded: true}
	l3 := &profile.Location{ID: 3, Mapping: m2, Line: []profile.Line{{Function: f3}}}
	p := &profile.Profile{
		SampleType:        []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		DefaultSampleType: "cpu",
		Mapping:           []*profile.Mapping{m1, m2},
		Function:          []*profile.Function{f1, f2, f3},
		Location:          []*profile.Location{l1, l2, l3},
		DropFrames:        "drop.*", KeepFrames: "keep",
		TimeNanos: 1700000000000000000, DurationNanos: 5e9,
		PeriodType: &profile.ValueType{Type: "cpu", Unit: "nanoseconds"}, Period: 1000000,
		Comments: []string{"a comment", "another"},
		DocURL:   "https://example.invalid/doc",
	}
	for i := 0; i < 300; i++ {
		s := &profile.Sample{Location: []*profile.Location{l1, l2}, Value: []int64{int64(i), -int64(i) * 1000000}}
		if i%3 == 0 {
			s.Location = []*profile.Location{l3, l2}
		}
		if i%2 == 0 {
			s.Label = map[string][]string{"thread": {fmt.Sprintf("t%d", i%5)}, "process": {"prog", "prog2"}}
			s.NumLabel = map[string][]int64{"pid": {int64(i)}, "bytes": {1 << 40, 3}}
			s.NumUnit = map[string][]string{"bytes": {"bytes", "bytes"}}
		}
		p.Sample = append(p.Sample, s)
	}
	if err := p.CheckValid(); err != nil {
		t.Fatal(err)
	}
	var ours, theirs bytes.Buffer
	if err := Write(p, &ours); err != nil {
		t.Fatal(err)
	}
	if err := p.Write(&theirs); err != nil {
		t.Fatal(err)
	}
	a, err := profile.Parse(&ours)
	if err != nil {
		t.Fatalf("profile.Parse of Write's: %v", err)
	}
	b, err := profile.Parse(&theirs)
	if err != nil {
		t.Fatal(err)
	}
	show := func(p *profile.Profile) string {
		s := p.String()
		s += fmt.Sprintf("\ndefault %q drop %q keep %q doc %q comments %q\n", p.DefaultSampleType, p.DropFrames, p.KeepFrames, p.DocURL, p.Comments)
		for _, m := range p.Mapping {
			s += fmt.Sprintf("mapping %d inline %v\n", m.ID, m.HasInlineFrames)
		}
		for _, l := range p.Location {
			s += fmt.Sprintf("location %d folded %v", l.ID, l.IsFolded)
			for _, ln := range l.Line {
				s += fmt.Sprintf(" %s:%d:%d %s", ln.Function.Filename, ln.Line, ln.Column, ln.Function.SystemName)
			}
			s += "\n"
		}
		return s
	}
	if x, y := show(a), show(b); x != y {
		t.Fatalf("Write's profile reads back as\n%s\nprofile.Write's as\n%s", x, y)
	}
	if !bytes.Contains([]byte(show(a)), []byte("another")) || len(a.Sample) != 300 {
		t.Fatalf("the comparison saw too little:\n%s", show(a))
	}
}
