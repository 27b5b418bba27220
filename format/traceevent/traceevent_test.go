package traceevent

import (
	"bytes"
	"encoding/json"
	"testing"
)

// Times are exact to the nanosecond, before the origin too; names of any
// bytes make valid JSON; stack frames are shared by their parent and name.
func TestWriterTimesAndFrames(t *testing.T) {
	var b bytes.Buffer
	w := New(&b, 1_000_000_000_000)
	root := w.Frame(0, "main", "prog")
	leaf := w.Frame(root, "f\xff\"", "prog")
	if again := w.Frame(root, "f\xff\"", "prog"); again != leaf || root == leaf {
		t.Fatalf("frames %d, %d, %d", root, leaf, again)
	}
	w.Instant(1, 2, "sample", "f", 1_000_000_001_234, leaf, Str("stack", "main;f"))
	w.Begin(1, 2, "call", "g", 999_999_999_999, Num("n", 3))
	w.End(1, 2, 1_000_000_000_007)
	w.Complete(1, 2, "sched", "running", 1_000_000_000_000, 1_000_002_000_001)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		TraceEvents []struct {
			Ph  string
			Ts  json.Number
			Dur json.Number
			Sf  int
		} `json:"traceEvents"`
		StackFrames map[string]struct{ Name, Parent string } `json:"stackFrames"`
	}
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	got := ""
	for _, e := range doc.TraceEvents {
		got += e.Ph + ":" + string(e.Ts) + ":" + string(e.Dur) + " "
	}
	if want := "i:1.234: B:-0.001: E:0.007: X:0.000:2000.001 "; got != want {
		t.Fatalf("events %q, want %q", got, want)
	}
	if f := doc.StackFrames["2"]; f.Name != "f\ufffd\"" || f.Parent != "1" || doc.TraceEvents[0].Sf != 2 {
		t.Fatalf("stack frames %+v, sample's sf %d", doc.StackFrames, doc.TraceEvents[0].Sf)
	}
}

// A string is written as encoding/json writes it, whatever its bytes.
func TestQuotedAsEncodingJSON(t *testing.T) {
	for _, s := range []string{"", "main.f", "a\"b\\c", "<&>", "\x00\x01\b\f\n\r\t\x1f\x7f", "\xff\xfe", "é世\u2028\u2029x", "f\xe2\x80", "std::vector<int>::push_back(int&&)"} {
		checkQuoted(t, s)
	}
}

func FuzzQuoted(f *testing.F) {
	f.Add("a\xffb<\u2028")
	f.Fuzz(checkQuoted)
}

func checkQuoted(t *testing.T, s string) {
	want, _ := json.Marshal(s)
	if got := appendQuoted([]byte{'"'}, s); string(append(got, '"')) != string(want) {
		t.Fatalf("%q written %s, encoding/json writes %s", s, append(got, '"'), want)
	}
}
