package a2n

import (
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"
)

// TestCachedInlineCallsAreTheDWARFs: the calls inlined at every address
// of an -O2 -g program and of a Go program are the same read from the
// DWARF and from the table cache (the first cached run writes the
// table, which holds what the DWARF gives; the second reads it), some
// addresses have them, and a damaged entry is a miss, read again.
func TestCachedInlineCallsAreTheDWARFs(t *testing.T) {
	dir := t.TempDir()
	prog := filepath.Join(dir, "inlined")
	if out, err := exec.Command("gcc", "-O2", "-g", "-o", prog, "../../tools/post/testdata/inlined.c").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	gosrc := filepath.Join(dir, "main.go")
	if err := os.WriteFile(gosrc, []byte("package main\n\nimport (\"fmt\"; \"strings\")\n\nfunc main() { fmt.Println(strings.Repeat(\"hi\", 3)) }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	goprog := filepath.Join(dir, "goprog")
	gb := exec.Command("go", "build", "-o", goprog, gosrc)
	gb.Dir = dir
	gb.Env = append(os.Environ(), "GO111MODULE=off")
	if out, err := gb.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, path := range []string{prog, goprog} {
		plain := (&Cache{}).Module(path)
		cache := filepath.Join(dir, "cache-"+filepath.Base(path))
		lo, hi := textRange(t, path)
		for run := 0; run < 3; run++ {
			cached := (&Cache{Dir: cache}).Module(path)
			inlined := 0
			for va := lo; va < hi; va++ {
				want, got := plain.InlineCalls(va), cached.InlineCalls(va)
				if len(want) > 0 {
					inlined++
				}
				if !reflect.DeepEqual(want, got) {
					t.Fatalf("%s run %d %#x: DWARF %+v, cached %+v", filepath.Base(path), run, va, want, got)
				}
			}
			if inlined == 0 {
				t.Fatalf("%s: no address in an inlined call", filepath.Base(path))
			}
			key := cached.dwarfCacheKey("inline")
			data, err := os.ReadFile(cachePath(cache, key))
			if err != nil {
				t.Fatalf("%s run %d: no inline table cached: %v", filepath.Base(path), run, err)
			}
			tab, ok := parseInlineTable(data, key)
			if !ok || !reflect.DeepEqual(tab, plain.inl.t) {
				t.Fatalf("%s run %d: the cached table (read: %v) is not the DWARF's", filepath.Base(path), run, ok)
			}
			t.Logf("%s run %d: %d of %d addresses in inlined calls, the same", filepath.Base(path), run, inlined, hi-lo)
			if run == 1 { // damage the entry: a node whose parent comes after it
				binary.LittleEndian.PutUint32(data[len(data)-32+16:], uint32(len(tab.nodes)))
				if err := os.WriteFile(cachePath(cache, key), data, 0o600); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

// TestInlineTableRejectsDamage: parseInlineTable refuses an entry cut
// short, with another key, a string index out of range, an empty range,
// nodes out of order or a node outside its parent.
func TestInlineTableRejectsDamage(t *testing.T) {
	key := []byte("inline\x00k")
	good := &inlineTable{strs: []string{"f", "a.c"}, nodes: []inlineNode{
		{low: 0x10, high: 0x40, parent: -1, name: 0, file: 1, line: 3},
		{low: 0x20, high: 0x30, parent: 0, name: 0, file: 1, line: 4},
	}}
	dir := t.TempDir()
	encode := func(tab *inlineTable) []byte {
		writeInlineTable(dir, key, tab)
		b, err := os.ReadFile(cachePath(dir, key))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if got, ok := parseInlineTable(encode(good), key); !ok || !reflect.DeepEqual(got, good) {
		t.Fatalf("the table read back: %+v %v", got, ok)
	}
	if got := good.calls(0x25); len(got) != 2 || got[0].Line != 3 || got[1].Line != 4 {
		t.Fatalf("calls at 0x25: %+v", got)
	}
	if got := good.calls(0x35); len(got) != 1 || got[0].Line != 3 {
		t.Fatalf("calls at 0x35: %+v", got)
	}
	if got := good.calls(0x40); got != nil {
		t.Fatalf("calls at 0x40: %+v", got)
	}
	damage := map[string]func(*inlineTable){
		"name out of range": func(t *inlineTable) { t.nodes[1].name = 2 },
		"empty range":       func(t *inlineTable) { t.nodes[1].high = t.nodes[1].low },
		"out of order":      func(t *inlineTable) { t.nodes[0].low = 0x28 },
		"outside parent":    func(t *inlineTable) { t.nodes[1].high = 0x48 },
		"parent after":      func(t *inlineTable) { t.nodes[0].parent = 1 },
	}
	for what, f := range damage {
		bad := &inlineTable{strs: good.strs, nodes: append([]inlineNode(nil), good.nodes...)}
		f(bad)
		if _, ok := parseInlineTable(encode(bad), key); ok {
			t.Errorf("%s: read as a table", what)
		}
	}
	b := encode(good)
	if _, ok := parseInlineTable(b[:len(b)-1], key); ok {
		t.Error("a table cut short: read")
	}
	if _, ok := parseInlineTable(b, []byte("inline\x00other")); ok {
		t.Error("another key's table: read")
	}
}
