package a2n

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"perfinsp/format/trace"
)

// TestChangedSinceMapped: a module whose file was modified after the
// trace first mapped it is named in Problems, with both times; one
// modified before its mapping (built, then run in the trace) is not, nor
// a module of a trace from another machine (--root: files copied since).
func TestChangedSinceMapped(t *testing.T) {
	exe, err := os.ReadFile("/bin/true")
	if err != nil {
		t.Skip("no /bin/true to copy")
	}
	prog := filepath.Join(t.TempDir(), "prog")
	if err := os.WriteFile(prog, exe, 0o755); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(prog)
	if err != nil {
		t.Fatal(err)
	}
	mtime := fi.ModTime().UnixNano()
	changed := func(mappedAt int64, root string) bool {
		r := NewCached(nil, "")
		r.Cache.Root = root
		r.Clock = func(t uint64) int64 { return int64(t) } // record times are wall times here
		r.Apply(&trace.Record{Major: trace.MajorMTE, Minor: trace.MTESegment, Time: uint64(mappedAt),
			Fixed: []uint64{5, 0x400000, 0x10000, 0, 5}, Str: prog})
		r.Resolve(5, 0x400100, false)
		for _, p := range r.Cache.Problems() {
			if strings.HasPrefix(p, prog+" changed at ") && strings.Contains(p, "after the trace mapped it") {
				return true
			}
		}
		return false
	}
	if !changed(mtime-1e9, "") {
		t.Error("a file modified a second after its mapping: no warning")
	}
	if changed(mtime+1e9, "") {
		t.Error("a file modified a second before its mapping: warned")
	}
	if changed(mtime-1e9, "/") {
		t.Error("with --root: warned")
	}
}
