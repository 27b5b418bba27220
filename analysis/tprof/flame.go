package tprof

import (
	"bufio"
	"bytes"
	"encoding/xml"
	"fmt"
	"hash/fnv"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Flame graph geometry: a frame's row height, the margins, the header,
// and the width the labels are first cut for (the script cuts them again
// for the width the graph is shown at).
const (
	flameRowH    = 16
	flamePad     = 10
	flameHeaderH = 44
	flameFooterH = 22
	flameFontPx  = 12
	flameCharPx  = 7.0 // a character of the 12 px font, on average
	flameWidthPx = 1200.0
	// flameMinFrac is the share of the graph below which a frame is left
	// out (a third of a pixel at 1200 px; its ticks stay in its parent).
	flameMinFrac = 0.3 / (flameWidthPx - 2*flamePad)
)

// WriteFlameSVG writes a flame graph of the call tree (the folded stacks)
// as a standalone SVG: one box per call-tree node, width by inclusive
// ticks, root at the bottom, a tooltip with the counts on every box. It
// is as wide as the window that shows it (positions in percent), and its
// script (no other file needed) zooms on a click (a frame's ancestors
// stay, greyed, below it), searches with a regular expression and shows
// the matched share of the graph, and resets either.
func (rep *Report) WriteFlameSVG(out io.Writer, title string) error {
	return writeFlame(out, title, rep.tree(), nil)
}

// WriteFlameDiffSVG writes a differential flame graph: the call tree of
// this report (the widths), each frame coloured by how its share of all
// ticks changed from the base profile's, read as folded stacks from base
// (flamegraph.pl's input: post --folded of the earlier run): red where it
// grew, blue where it shrank, as Brendan Gregg's difffolded.pl and
// flamegraph.pl draw it; the tooltips give both. Processes are compared
// by name ("name (pid N)": the pids of two runs differ).
func (rep *Report) WriteFlameDiffSVG(out io.Writer, title string, base io.Reader) error {
	d := &flameDiff{base: map[string]uint64{}}
	sc := bufio.NewScanner(base)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for n := 1; sc.Scan(); n++ {
		l := strings.TrimSpace(sc.Text())
		if l == "" {
			continue
		}
		i := strings.LastIndexByte(l, ' ')
		c, err := strconv.ParseUint(l[i+1:], 10, 64)
		if i <= 0 || err != nil {
			return fmt.Errorf("base folded stacks, line %d: not \"frame;frame;... count\": %q", n, l)
		}
		d.baseTotal += c
		path := ""
		for j, f := range strings.Split(l[:i], ";") {
			if j == 0 {
				f = diffProcess(f)
				path = f
			} else {
				path += ";" + f
			}
			d.base[path] += c
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("base folded stacks: %w", err)
	}
	return writeFlame(out, title, byProcessName(rep.tree()), d)
}

// byProcessName merges the processes of a call tree that have one name
// (a differential graph compares runs, not pids): the root's children
// named "name (pid N)" become one "name" each, their subtrees merged.
func byProcessName(root *node) *node {
	out := &node{name: root.name, id: root.id, incl: root.incl, excl: root.excl}
	byName := map[string]*node{}
	for _, c := range root.sorted() {
		name := diffProcess(c.name)
		p := byName[name]
		if p == nil {
			p = &node{name: name, id: c.id}
			byName[name] = p
			out.list = append(out.list, p)
		}
		mergeNode(p, c)
	}
	if len(out.list) > nodeListMax {
		out.kids = map[int32]*node{}
		for _, k := range out.list {
			out.kids[k.id] = k
		}
		out.list = nil
	}
	return out
}

// mergeNode adds src's ticks and subtree to dst.
func mergeNode(dst, src *node) {
	dst.incl += src.incl
	dst.excl += src.excl
	for _, c := range src.children() {
		mergeNode(dst.child(c.id, c.name), c)
	}
}

// diffProcess is a process frame as a differential graph compares it:
// "name (pid N)" without its pid.
func diffProcess(f string) string {
	if i := strings.LastIndex(f, " (pid "); i > 0 && strings.HasSuffix(f, ")") {
		return f[:i]
	}
	return f
}

// flameDiff is what a differential graph draws besides the tree: each
// node's ticks in the base profile (by path), for its colour and tooltip.
type flameDiff struct {
	base      map[string]uint64 // ticks per path (names joined by ';')
	baseTotal uint64
}

// writeFlame writes the flame graph of root (diff: colours by the change
// from a base profile, nil: by name).
func writeFlame(out io.Writer, title string, root *node, diff *flameDiff) error {
	depth := 0
	var measure func(n *node, d int)
	measure = func(n *node, d int) {
		if d > depth {
			depth = d
		}
		for _, c := range n.children() {
			if float64(c.incl) >= flameMinFrac*float64(root.incl) {
				measure(c, d+1)
			}
		}
	}
	measure(root, 0)
	height := flameHeaderH + (depth+1)*flameRowH + flameFooterH
	w := bufio.NewWriter(out)
	fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8" standalone="no"?>
<svg version="1.1" width="100%%" height="%d" onload="init(evt)" xmlns="http://www.w3.org/2000/svg" font-family="Verdana, sans-serif" font-size="%d">
<style>
.f text { pointer-events: none; fill: #000; }
.f:hover rect { stroke: #000; stroke-width: 0.5; cursor: pointer; }
.hide { display: none; }
.parent rect { opacity: 0.5; }
.ctl { cursor: pointer; fill: #333; }
</style>
<rect x="0" y="0" width="100%%" height="100%%" fill="#f8f8f8"/>
<text x="50%%" y="24" text-anchor="middle" font-size="17">%s</text>
<text id="reset" class="ctl hide" x="%d" y="24">Reset Zoom</text>
<text id="search" class="ctl" x="99%%" y="24" text-anchor="end">Search</text>
<text id="matched" x="99%%" y="%d" text-anchor="end"></text>
<text id="details" x="%d" y="%d"> </text>
`, height, flameFontPx, xmlText(title), flamePad, height-6, flamePad, height-6)
	if root.incl == 0 {
		fmt.Fprintln(w, `<text x="50%" y="60" text-anchor="middle">no ticks</text>`)
		fmt.Fprintln(w, "</svg>")
		return w.Flush()
	}
	fmt.Fprintf(w, "<svg id=\"frames\" x=\"%d\" y=\"%d\" width=\"100%%\" height=\"%d\">\n", 0, flameHeaderH, (depth+1)*flameRowH)
	// x and widths are shares of the frame area (between the margins),
	// written as percentages of the whole width.
	span := 1.0 - 2*flamePad/flameWidthPx
	left := flamePad / flameWidthPx
	var path []string
	var draw func(n *node, x float64, d int, proc uint64)
	draw = func(n *node, x float64, d int, proc uint64) {
		frac := float64(n.incl) / float64(root.incl)
		if frac < flameMinFrac {
			return
		}
		if d == 1 {
			path = append(path, diffProcess(n.name))
		} else if d > 1 {
			path = append(path, n.name)
		}
		y := (depth - d) * flameRowH
		tip := fmt.Sprintf("%s (%d ticks, %.2f%%)", n.name, n.incl, pct(n.incl, root.incl))
		if d == 1 {
			proc = n.incl
		} else if d > 1 {
			tip = fmt.Sprintf("%s (%d ticks, %.2f%% of all, %.2f%% of the process)", n.name, n.incl, pct(n.incl, root.incl), pct(n.incl, proc))
		}
		fill := flameColor(n.name)
		if diff != nil {
			var b uint64
			if d == 0 {
				b = diff.baseTotal
			} else {
				b = diff.base[strings.Join(path, ";")]
			}
			tip += fmt.Sprintf("; base %d ticks, %+.2f%% of all", b, pct(n.incl, root.incl)-pct(b, diff.baseTotal))
			fill = diffColor(pct(n.incl, root.incl) - pct(b, diff.baseTotal))
		}
		fmt.Fprintf(w, `<g class="f" data-x="%.6f" data-w="%.6f" data-d="%d"><title>%s</title><rect x="%.4f%%" y="%d" width="%.4f%%" height="%d" fill="%s" rx="2"/><text x="%.4f%%" y="%d">%s</text></g>`+"\n",
			x, frac, d, xmlText(tip), 100*(left+x*span), y, 100*frac*span, flameRowH-1, fill, 100*(left+x*span)+0.25, y+flameRowH-4,
			xmlText(fitLabel(n.name, frac*span*flameWidthPx)))
		cx := x
		for _, c := range n.sorted() {
			draw(c, cx, d+1, proc)
			cx += float64(c.incl) / float64(root.incl)
		}
		if d > 0 {
			path = path[:len(path)-1]
		}
	}
	draw(root, 0, 0, 0)
	fmt.Fprintln(w, "</svg>")
	fmt.Fprintf(w, "<script type=\"text/ecmascript\"><![CDATA[\nvar left = %g, span = %g, charPx = %g;\n%s]]></script>\n", left, span, flameCharPx, flameScript)
	fmt.Fprintln(w, "</svg>")
	return w.Flush()
}

// fitLabel is name cut to what px pixels hold: whole characters (runes,
// never a byte of one), ".." where cut, "" when fewer than three fit.
func fitLabel(name string, px float64) string {
	fit := int((px - 6) / flameCharPx)
	if fit < 3 {
		return ""
	}
	if utf8.RuneCountInString(name) <= fit {
		return name
	}
	n := 0
	for i := range name {
		if n == fit-2 {
			return name[:i] + ".."
		}
		n++
	}
	return name
}

// xmlText is s escaped for XML text and attributes: markup characters
// escaped, bytes that are not UTF-8 and characters XML does not allow
// replaced by U+FFFD (a symbol name is whatever bytes the binary holds).
func xmlText(s string) string {
	var b bytes.Buffer
	xml.EscapeText(&b, []byte(s)) // (replaces invalid UTF-8 and characters XML forbids)
	return b.String()
}

// flameColor gives a name a stable warm colour (kernel frames a cooler one).
func flameColor(name string) string {
	h := fnv.New32a()
	h.Write([]byte(name))
	v := h.Sum32()
	if strings.HasSuffix(name, "_[k]") {
		return fmt.Sprintf("rgb(%d,%d,%d)", 200+v%40, 120+v%60, 60+(v>>8)%40)
	}
	return fmt.Sprintf("rgb(%d,%d,%d)", 225+v%30, 80+(v>>8)%120, 40+(v>>16)%40)
}

// diffColor is a differential graph's colour of a change in share
// (points of percent): red where it grew, blue where it shrank, the
// deeper the larger (saturating at 5 points), white where it is the same.
func diffColor(delta float64) string {
	a := min(1, max(-1, delta/5))
	if a >= 0 {
		c := int(255 - 200*a)
		return fmt.Sprintf("rgb(255,%d,%d)", c, c)
	}
	c := int(255 + 200*a)
	return fmt.Sprintf("rgb(%d,%d,255)", c, c)
}

// flameScript is the graph's behaviour: labels cut for the shown width,
// zoom on click, search, reset. Each frame's data-x and data-w are its
// place and width as shares of the whole graph, data-d its depth.
const flameScript = `var svg, frames, fr = [], zoomed = null, details, matched, resetBtn, searchBtn, searching = null;
function init(evt) {
	svg = document.documentElement;
	frames = document.getElementById("frames");
	details = document.getElementById("details");
	matched = document.getElementById("matched");
	resetBtn = document.getElementById("reset");
	searchBtn = document.getElementById("search");
	var gs = frames.getElementsByTagName("g");
	for (var i = 0; i < gs.length; i++) {
		var g = gs[i];
		var f = {g: g, x: parseFloat(g.getAttribute("data-x")), w: parseFloat(g.getAttribute("data-w")),
			d: parseInt(g.getAttribute("data-d"), 10), rect: g.getElementsByTagName("rect")[0],
			text: g.getElementsByTagName("text")[0], tip: g.getElementsByTagName("title")[0].textContent};
		f.name = f.tip.replace(/ \([0-9]+ ticks.*$/, "");
		f.fill = f.rect.getAttribute("fill");
		fr.push(f);
		g.addEventListener("click", (function(f) { return function() { zoom(f); }; })(f));
		g.addEventListener("mouseover", (function(f) { return function() { details.textContent = f.tip; }; })(f));
		g.addEventListener("mouseout", function() { details.textContent = " "; });
	}
	resetBtn.addEventListener("click", unzoom);
	searchBtn.addEventListener("click", function() { searching ? clearSearch() : search(); });
	window.addEventListener("keydown", function(e) {
		if ((e.ctrlKey || e.metaKey) && e.key === "f") { e.preventDefault(); search(); }
		if (e.key === "Escape") { clearSearch(); unzoom(); }
	});
	window.addEventListener("resize", function() { layout(); });
	layout();
}
// view: each frame's shown place (vx, vw as shares of the frame area) and
// whether it shows, for the zoomed frame z (null: the whole graph).
function layout() {
	var width = svg.getBoundingClientRect().width || 1200;
	for (var i = 0; i < fr.length; i++) {
		var f = fr[i], vx = f.x, vw = f.w, show = true, parent = false;
		if (zoomed) {
			var z = zoomed;
			if (f.d < z.d) {
				show = f.x <= z.x + 1e-9 && f.x + f.w >= z.x + z.w - 1e-9;
				vx = 0; vw = 1; parent = true;
			} else {
				show = f.x >= z.x - 1e-9 && f.x + f.w <= z.x + z.w + 1e-9;
				vx = (f.x - z.x) / z.w; vw = f.w / z.w;
			}
		}
		f.g.setAttribute("class", show ? (parent ? "f parent" : "f") : "f hide");
		if (!show) continue;
		var px = (left + vx * span) * 100, pw = vw * span * 100;
		f.rect.setAttribute("x", px.toFixed(4) + "%");
		f.rect.setAttribute("width", pw.toFixed(4) + "%");
		f.text.setAttribute("x", (px + 0.25).toFixed(4) + "%");
		f.text.textContent = fit(f.name, vw * span * width);
	}
}
// fit cuts a name to the characters (code points, never half of one) a
// width in pixels holds.
function fit(name, px) {
	var n = Math.floor((px - 6) / charPx);
	if (n < 3) return "";
	var cs = Array.from(name);
	if (cs.length <= n) return name;
	return cs.slice(0, n - 2).join("") + "..";
}
function zoom(f) {
	zoomed = f.d === 0 ? null : f;
	resetBtn.setAttribute("class", zoomed ? "ctl" : "ctl hide");
	layout();
}
function unzoom() { zoom(fr[0]); }
function search() {
	var term = prompt("Search for (a regular expression):", searching ? searching.source : "");
	if (term === null || term === "") return;
	var re;
	try { re = new RegExp(term); } catch (e) { alert("not a regular expression: " + e.message); return; }
	searching = re;
	// the matched share: the frames that match, less those under another
	// match (their ticks are in it already)
	var hits = [];
	for (var i = 0; i < fr.length; i++) {
		var f = fr[i];
		if (f.d > 0 && re.test(f.name)) {
			f.rect.setAttribute("fill", "rgb(230,0,230)");
			hits.push(f);
		} else {
			f.rect.setAttribute("fill", f.fill);
		}
	}
	hits.sort(function(a, b) { return a.x - b.x || b.w - a.w; });
	var sum = 0, end = -1;
	for (var j = 0; j < hits.length; j++) {
		var h = hits[j];
		if (h.x + h.w <= end + 1e-12) continue;
		sum += h.w; end = h.x + h.w;
	}
	matched.textContent = "Matched: " + (100 * sum).toFixed(1) + "%";
	searchBtn.textContent = "Reset Search";
}
function clearSearch() {
	searching = null;
	for (var i = 0; i < fr.length; i++) fr[i].rect.setAttribute("fill", fr[i].fill);
	matched.textContent = "";
	searchBtn.textContent = "Search";
}
`
