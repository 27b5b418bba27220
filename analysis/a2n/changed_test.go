package a2n

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

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

// TestReplacedSinceMapped: a module whose path holds another file (inode)
// of the same device than the MTE_FILE record of its mapping says is
// named in Problems, though the new file's modification time is older
// than the mapping (a package upgrade keeps the package's times); the
// file traced is not, nor one whose mapping names another device (the
// same file on another boot, or through overlayfs).
func TestReplacedSinceMapped(t *testing.T) {
	exe, err := os.ReadFile("/bin/true")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	prog := filepath.Join(dir, "prog")
	if err := os.WriteFile(prog, exe, 0o755); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(prog, &st); err != nil {
		t.Fatal(err)
	}
	mappedAt := time.Now().UnixNano()
	replaced := func(major, minor uint32, ino uint64) bool {
		r := NewCached(nil, "")
		r.Clock = func(t uint64) int64 { return int64(t) } // record times are wall times here
		r.Apply(&trace.Record{Major: trace.MajorMTE, Minor: trace.MTESegment, Time: uint64(mappedAt),
			Fixed: []uint64{5, 0x400000, 0x10000, 0, 5}, Str: prog})
		r.Apply(&trace.Record{Major: trace.MajorMTE, Minor: trace.MTEFile, Time: uint64(mappedAt),
			Fixed: []uint64{5, 0x400000, uint64(major), uint64(minor), ino}})
		r.Resolve(5, 0x400100, false)
		for _, p := range r.Cache.Problems() {
			if strings.HasPrefix(p, prog+" was replaced after the trace mapped it") {
				return true
			}
		}
		return false
	}
	major, minor := unix.Major(st.Dev), unix.Minor(st.Dev)
	// the traced file, its times set back a day: no warning
	old := time.Now().Add(-24 * time.Hour)
	if err := os.Chtimes(prog, old, old); err != nil {
		t.Fatal(err)
	}
	if replaced(major, minor, st.Ino) {
		t.Error("the file traced: warned")
	}
	// a new file renamed over it with a day-old mtime, as dpkg does
	next := filepath.Join(dir, "prog.new")
	if err := os.WriteFile(next, exe, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(next, old, old); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(next, prog); err != nil {
		t.Fatal(err)
	}
	if !replaced(major, minor, st.Ino) {
		t.Error("a file renamed over the one mapped, of an older mtime: no warning")
	}
	if replaced(major+1, minor, st.Ino) {
		t.Error("a mapping of another device: warned")
	}
}

// TestAnotherFileByThatPath: a module whose path holds another inode of
// the same device than the one mapped, but a file that has been there
// since before the mapping (its ctime, which a rename would have set, is
// older), was not replaced: the process saw another file by that path, as
// one in a chroot or a container does. The warning says so and names
// --root, rather than that the file was replaced.
func TestAnotherFileByThatPath(t *testing.T) {
	exe, err := os.ReadFile("/bin/true")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	prog, inChroot := filepath.Join(dir, "prog"), filepath.Join(dir, "root-prog")
	for _, p := range []string{prog, inChroot} {
		if err := os.WriteFile(p, exe, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var st, other unix.Stat_t
	if err := unix.Stat(prog, &st); err != nil {
		t.Fatal(err)
	}
	if err := unix.Stat(inChroot, &other); err != nil {
		t.Fatal(err)
	}
	r := NewCached(nil, "")
	r.Clock = func(t uint64) int64 { return int64(t) } // record times are wall times here
	mappedAt := uint64(st.Ctim.Nano() + 1e9)           // the chroot's copy of the path mapped a second later
	r.Apply(&trace.Record{Major: trace.MajorMTE, Minor: trace.MTESegment, Time: mappedAt,
		Fixed: []uint64{5, 0x400000, 0x10000, 0, 5}, Str: prog})
	r.Apply(&trace.Record{Major: trace.MajorMTE, Minor: trace.MTEFile, Time: mappedAt,
		Fixed: []uint64{5, 0x400000, uint64(unix.Major(other.Dev)), uint64(unix.Minor(other.Dev)), other.Ino}})
	r.Resolve(5, 0x400100, false)
	var got []string
	for _, p := range r.Cache.Problems() {
		if strings.HasPrefix(p, prog+" ") {
			got = append(got, p)
		}
	}
	if len(got) != 1 || !strings.HasPrefix(got[0], prog+" is another file") || !strings.Contains(got[0], "--root") {
		t.Fatalf("warnings %q, want one that %s is another file than the one mapped, naming --root", got, prog)
	}
}
