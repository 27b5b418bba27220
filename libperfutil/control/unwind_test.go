package control

import "testing"

// perf's --call-graph forms are read as perf reads them; a bad size or
// mode is refused with what to write instead.
func TestParseUnwind(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Unwind
		ok   bool
	}{
		{"fp", Unwind{}, true},
		{"dwarf", Unwind{DWARF: true, StackBytes: DefaultStackBytes}, true},
		{"dwarf,16384", Unwind{DWARF: true, StackBytes: 16384}, true},
		{"dwarf,65528", Unwind{DWARF: true, StackBytes: MaxStackBytes}, true},
		{"dwarf,65536", Unwind{}, false},
		{"dwarf,100", Unwind{}, false},
		{"dwarf,0", Unwind{}, false},
		{"dwarf,x", Unwind{}, false},
		{"fp,8192", Unwind{}, false},
		{"lbr", Unwind{}, false},
		{"", Unwind{}, false},
	} {
		got, err := ParseUnwind(c.in)
		if (err == nil) != c.ok || (c.ok && got != c.want) {
			t.Errorf("ParseUnwind(%q) = %+v, %v; want %+v, ok %v", c.in, got, err, c.want, c.ok)
		}
		if c.ok {
			if back, err := ParseUnwind(got.String()); err != nil || back != got {
				t.Errorf("%q: String %q reads back as %+v, %v", c.in, got.String(), back, err)
			}
		}
	}
}
