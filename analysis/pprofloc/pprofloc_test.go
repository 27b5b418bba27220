package pprofloc

import (
	"testing"

	"github.com/google/pprof/profile"
)

func TestOneLocationPerKey(t *testing.T) {
	p := &profile.Profile{SampleType: []*profile.ValueType{{Type: "calls", Unit: "count"}}}
	tab := New(p)
	a := tab.Named("a")
	b := tab.Loc("k\x00b", "b", "b.c", 7)
	if tab.Named("a") != a || tab.Loc("k\x00b", "other", "", 0) != b {
		t.Fatal("a key seen before must give its first location")
	}
	if len(p.Function) != 2 || len(p.Location) != 2 {
		t.Fatalf("functions %d locations %d, want 2 and 2", len(p.Function), len(p.Location))
	}
	if a.ID != 1 || b.ID != 2 || b.Line[0].Function.Name != "b" || b.Line[0].Function.Filename != "b.c" || b.Line[0].Function.StartLine != 7 {
		t.Fatalf("IDs or names wrong: %+v %+v", a, b.Line[0].Function)
	}
	p.Sample = append(p.Sample, &profile.Sample{Location: []*profile.Location{b, a}, Value: []int64{1}})
	if err := p.CheckValid(); err != nil {
		t.Fatal(err)
	}
}
