package itrace

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/pprof/profile"
)

// TestStacks replays TestReplay's records with stacks on: the folded
// lines and the pprof samples carry each block's instructions under its
// call stack (the PLT stub's instruction goes to main, as in callgrind;
// the signal handler sits on main's stack), and sum to the total.
func TestStacks(t *testing.T) {
	rep := NewReport(mapNamer{}, nil)
	rep.EnableStacks()
	for _, r := range exampleStream() {
		rep.Apply(r)
	}
	rep.Finish()
	var buf bytes.Buffer
	if err := rep.WriteFolded(&buf); err != nil {
		t.Fatal(err)
	}
	want := "pid 7;main 9\npid 7;main;f 2\npid 7;main;g 4\npid 7;main;h 3\n"
	if got := buf.String(); got != want {
		t.Fatalf("folded:\n%s\nwant:\n%s", got, want)
	}
	buf.Reset()
	if err := rep.WritePprof(&buf); err != nil {
		t.Fatal(err)
	}
	p, err := profile.Parse(&buf)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	flat := map[string]int64{}
	for _, s := range p.Sample {
		total += s.Value[0]
		flat[s.Location[0].Line[0].Function.Name] += s.Value[0]
		if root := s.Location[len(s.Location)-1].Line[0].Function.Name; root != "main" {
			t.Errorf("a stack rooted at %s, want main", root)
		}
	}
	if total != int64(rep.Instructions) || flat["main"] != 9 || flat["g"] != 4 || p.SampleType[0].Type != "instructions" {
		t.Fatalf("pprof: total %d (want %d), flat %v, type %v", total, rep.Instructions, flat, p.SampleType[0])
	}
	if err := NewReport(mapNamer{}, nil).WriteFolded(&buf); err == nil || !strings.Contains(err.Error(), "EnableStacks") {
		t.Fatalf("WriteFolded without stacks: %v", err)
	}
}
