package tprof

import (
	"bytes"
	"encoding/xml"
	"io"
	"strings"
	"testing"
	"unicode/utf8"

	"perfinsp/analysis/a2n"
)

// flameReport is a report of three stacks: a function with a long
// non-ASCII name (cut in its labels), one whose name is bytes that are not
// UTF-8 and hold XML's special characters, and a kernel frame.
func flameReport() *Report {
	long := "Größenänderung_über_alle_Einträge_" + strings.Repeat("äöü€", 40)
	rep := &Report{ProcName: map[uint32]string{7: "prog"}, ThreadNm: map[[2]uint32]string{}}
	rep.res = []a2n.Result{
		{Module: "/bin/prog", Symbol: "main"},
		{Module: "/bin/prog", Symbol: long},
		{Module: "/bin/prog", Symbol: "bad\xff\xfe<&>\x01name"},
		{Module: "[kernel]", Symbol: "schedule"},
	}
	rep.stk = []stackEntry{
		{pid: 7, tid: 7, frames: []int32{0, 1}, n: 900},
		{pid: 7, tid: 7, frames: []int32{0, 2}, n: 90},
		{pid: 7, tid: 7, frames: []int32{0, 3}, kernel: 1, n: 10},
	}
	rep.Total = 1000
	return rep
}

// TestFlameSVGValidAndInteractive: the flame graph is well-formed XML in
// valid UTF-8 whatever the names' bytes (labels cut by character, names
// escaped), as wide as its window, and carries its script (zoom, search,
// reset) and the data the script reads.
func TestFlameSVGValidAndInteractive(t *testing.T) {
	var buf bytes.Buffer
	if err := flameReport().WriteFlameSVG(&buf, "tprof <title> & \xff"); err != nil {
		t.Fatal(err)
	}
	svg := buf.Bytes()
	if !utf8.Valid(svg) {
		t.Fatal("the SVG is not valid UTF-8")
	}
	// Strict XML parse; collect the frames' labels and tooltips.
	d := xml.NewDecoder(bytes.NewReader(svg))
	var labels, titles []string
	var stack []string
	frames, scripts := 0, 0
	var rootWidth string
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("the SVG does not parse as XML: %v", err)
		}
		switch x := tok.(type) {
		case xml.StartElement:
			stack = append(stack, x.Name.Local)
			if x.Name.Local == "svg" && rootWidth == "" {
				for _, a := range x.Attr {
					if a.Name.Local == "width" {
						rootWidth = a.Value
					}
				}
			}
			if x.Name.Local == "g" {
				frames++
				n := 0
				for _, a := range x.Attr {
					if strings.HasPrefix(a.Name.Local, "data-") {
						n++
					}
				}
				if n != 3 {
					t.Fatalf("a frame without its data-x, data-w, data-d: %v", x.Attr)
				}
			}
			if x.Name.Local == "script" {
				scripts++
			}
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		case xml.CharData:
			if len(stack) >= 2 && stack[len(stack)-2] == "g" {
				switch stack[len(stack)-1] {
				case "text":
					labels = append(labels, string(x))
				case "title":
					titles = append(titles, string(x))
				}
			}
		}
	}
	if rootWidth != "100%" {
		t.Fatalf("the graph's width is %q, want 100%% (as wide as its window)", rootWidth)
	}
	if frames != 6 || scripts != 1 {
		t.Fatalf("%d frames and %d scripts, want 6 (all, prog, main and three leaves) and 1", frames, scripts)
	}
	for _, fn := range []string{"function zoom(", "function search(", "function unzoom(", "function clearSearch(", "Array.from(name)"} {
		if !bytes.Contains(svg, []byte(fn)) {
			t.Fatalf("the script has no %s", fn)
		}
	}
	cut := false
	for _, l := range labels {
		if strings.HasPrefix(l, "Größenänderung") && strings.HasSuffix(l, "..") {
			cut = true
			if !utf8.ValidString(l) {
				t.Fatalf("label %q is cut inside a character", l)
			}
		}
	}
	if !cut {
		t.Fatalf("the long name's label is not cut: %q", labels)
	}
	bad := false
	for _, s := range titles {
		if strings.HasPrefix(s, "bad\uFFFD\uFFFD<&>\uFFFDname (90 ticks") {
			bad = true
		}
	}
	if !bad {
		t.Fatalf("the name of bytes that are not UTF-8 is not in a tooltip with U+FFFD for them: %q", titles)
	}
}

// TestFitLabel: labels are cut by character, with "..", and left out
// when fewer than three characters fit.
func TestFitLabel(t *testing.T) {
	for _, c := range []struct {
		name string
		px   float64
		want string
	}{
		{"main", 200, "main"},
		{"äöüäöüäöü", 6 + 5*flameCharPx, "äöü.."},
		{"€€€€€€", 6 + 4*flameCharPx, "€€.."},
		{"main", 6 + 2*flameCharPx, ""},
	} {
		if got := fitLabel(c.name, c.px); got != c.want {
			t.Errorf("fitLabel(%q, %g) = %q, want %q", c.name, c.px, got, c.want)
		}
	}
}

// TestFlameDiff: a differential graph colours a frame red where its share
// grew from the base profile's (folded stacks of another run, its pid
// another), blue where it shrank, white where it kept it, and says both
// counts in the tooltip.
func TestFlameDiff(t *testing.T) {
	base := "prog (pid 99);main;schedule_[k] 500\nprog (pid 99);main;other 500\n"
	var buf bytes.Buffer
	if err := flameReport().WriteFlameDiffSVG(&buf, "diff", strings.NewReader(base)); err != nil {
		t.Fatal(err)
	}
	fill := map[string]string{} // a frame's name -> its fill
	tips := map[string]string{}
	d := xml.NewDecoder(&buf)
	var title, elem string
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch x := tok.(type) {
		case xml.CharData:
			if elem == "title" {
				title = string(x)
			}
		case xml.StartElement:
			elem = x.Name.Local
			if x.Name.Local == "rect" && strings.Contains(title, " (") {
				for _, a := range x.Attr {
					if a.Name.Local == "fill" {
						name := title[:strings.Index(title, " (")]
						fill[name], tips[name] = a.Value, title
					}
				}
			}
			if x.Name.Local == "rect" {
				title = ""
			}
		}
	}
	want := map[string]string{
		"main":           "rgb(255,255,255)", // 100 % in both
		"schedule_[k]":   "rgb(55,55,255)",   // 50 % to 1 %
		"Größenänderung": "rgb(255,55,55)",   // 0 to 90 %
	}
	for name, w := range want {
		got := ""
		for n, f := range fill {
			if strings.HasPrefix(n, name) {
				got = f
			}
		}
		if got != w {
			t.Errorf("%s: fill %q, want %q (%v)", name, got, w, fill)
		}
	}
	if !strings.Contains(tips["schedule_[k]"], "base 500 ticks, -49.00% of all") {
		t.Errorf("tooltip %q", tips["schedule_[k]"])
	}
	if err := flameReport().WriteFlameDiffSVG(io.Discard, "x", strings.NewReader("no count here\n")); err == nil {
		t.Error("a base that is not folded stacks was taken")
	}
}
