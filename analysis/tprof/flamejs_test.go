package tprof

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"perfinsp/internal/testenv"
)

// flameScriptHarness runs the flame graph's script in node over the
// frames of the graph (their data attributes, fills and tooltips), with a
// document of those elements only, and prints what a click on the frame
// named by argv[3] and a search for argv[4] leave: each frame's shown x
// and width and whether it shows, the labels, the matched share.
const flameScriptHarness = `
const fs = require("fs");
const data = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
function el(attrs) {
	return {attrs: Object.assign({}, attrs), textContent: "", listeners: {},
		getAttribute(k) { return this.attrs[k]; }, setAttribute(k, v) { this.attrs[k] = String(v); },
		addEventListener(t, f) { this.listeners[t] = f; }};
}
const gs = data.map(f => {
	const g = el({"data-x": f.x, "data-w": f.w, "data-d": f.d, "class": "f"});
	const rect = el({fill: f.fill}), text = el({}), title = el({});
	title.textContent = f.tip;
	g.getElementsByTagName = t => ({rect: [rect], text: [text], title: [title]})[t];
	g.rect = rect; g.text = text;
	return g;
});
const ids = {frames: {getElementsByTagName: () => gs}, details: el({}), matched: el({}), reset: el({}), search: el({})};
global.document = {documentElement: {getBoundingClientRect: () => ({width: 1200})}, getElementById: id => ids[id]};
global.window = {addEventListener() {}};
global.prompt = () => process.argv[4];
global.alert = m => { throw new Error(m); };
eval(fs.readFileSync(process.argv[3], "utf8"));
init({});
const target = gs.find(g => g.getElementsByTagName("title")[0].textContent.startsWith(process.argv[5]));
target.listeners.click();
ids.search.listeners.click();
console.log(JSON.stringify({
	frames: gs.map(g => ({cls: g.attrs["class"], x: g.rect.attrs.x, w: g.rect.attrs.width, label: g.text.textContent, fill: g.rect.attrs.fill})),
	matched: ids.matched.textContent, reset: ids.reset.attrs["class"]}));
`

// TestFlameScriptZoomsAndSearches runs the graph's own script (node, a
// document of the graph's frames): a click on a frame makes it the whole
// width, its children scaled with it, its ancestors full width and greyed,
// the other frames hidden; a search colours the matching frames and gives
// their share of the graph, a frame under another match counted once.
func TestFlameScriptZoomsAndSearches(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.Missing(t, "node is not installed (apt-get install nodejs): the flame graph's script is not run")
	}
	var buf bytes.Buffer
	if err := flameReport().WriteFlameSVG(&buf, "t"); err != nil {
		t.Fatal(err)
	}
	svg := buf.String()
	var frames []map[string]string
	d := xml.NewDecoder(strings.NewReader(svg))
	var cur map[string]string
	var elem string
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch x := tok.(type) {
		case xml.StartElement:
			elem = x.Name.Local
			attr := map[string]string{}
			for _, a := range x.Attr {
				attr[a.Name.Local] = a.Value
			}
			if elem == "g" {
				cur = map[string]string{"x": attr["data-x"], "w": attr["data-w"], "d": attr["data-d"]}
				frames = append(frames, cur)
			}
			if elem == "rect" && cur != nil {
				cur["fill"] = attr["fill"]
			}
		case xml.CharData:
			if elem == "title" && cur != nil {
				cur["tip"] = string(x)
			}
		case xml.EndElement:
			elem = ""
			if x.Name.Local == "g" {
				cur = nil
			}
		}
	}
	script := svg[strings.Index(svg, "<![CDATA[")+len("<![CDATA[") : strings.Index(svg, "]]>")]
	dir := t.TempDir()
	fj, _ := json.Marshal(frames)
	for name, b := range map[string][]byte{"frames.json": fj, "script.js": []byte(script), "harness.js": []byte(flameScriptHarness)} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// frames: all, prog (pid 7), main, and main's three leaves; a click on
	// the long-named leaf (90 % of the graph), a search for "bad|main"
	out, err := exec.Command(node, filepath.Join(dir, "harness.js"), filepath.Join(dir, "frames.json"), filepath.Join(dir, "script.js"), "bad|main", "Größen").CombinedOutput()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, out)
	}
	var res struct {
		Frames         []struct{ Cls, X, W, Label, Fill string }
		Matched, Reset string
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(res.Frames) != 6 {
		t.Fatalf("%d frames: %s", len(res.Frames), out)
	}
	all, proc, main, long, bad := res.Frames[0], res.Frames[1], res.Frames[2], res.Frames[3], res.Frames[4]
	full := "98.3333%" // the frame area: the width less the margins
	if all.Cls != "f parent" || proc.Cls != "f parent" || main.Cls != "f parent" || all.W != full || main.W != full {
		t.Fatalf("after a click on the leaf, its ancestors are not full width and greyed: %+v %+v %+v", all, proc, main)
	}
	if long.Cls != "f" || long.W != full || bad.Cls != "f hide" || res.Frames[5].Cls != "f hide" || res.Reset != "ctl" {
		t.Fatalf("after the click: the leaf %+v, its siblings %+v %+v, reset %q", long, bad, res.Frames[5], res.Reset)
	}
	zoomedPx := 0.983333*1200 - 6
	fit := int(zoomedPx / flameCharPx)
	if !strings.HasPrefix(long.Label, "Größenänderung") || !strings.HasSuffix(long.Label, "..") || len([]rune(long.Label)) != fit {
		t.Fatalf("the long name's label at the zoomed width (%d characters): %q", fit, long.Label)
	}
	if res.Matched != "Matched: 100.0%" || main.Fill != "rgb(230,0,230)" || bad.Fill != "rgb(230,0,230)" || long.Fill == "rgb(230,0,230)" {
		t.Fatalf("search bad|main: %q, fills main %s bad %s long %s", res.Matched, main.Fill, bad.Fill, long.Fill)
	}
}
