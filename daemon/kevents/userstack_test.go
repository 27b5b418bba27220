package kevents

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// The mappings the unwinder keeps per process follow the session's records:
// MMAP2 adds (replacing what it overlaps, kept sorted), a fork copies the
// parent's, an exec starts anew, an exit is forgotten only later.
func TestUserMapsBookkeeping(t *testing.T) {
	u := newUserUnwinder()
	defer u.close()
	u.exec(10)
	id := func(n uint64) fileID { return fileID{8, 1, n} }
	u.mmap(10, userMap{start: 0x5000, end: 0x6000, id: id(1), path: "/a"})
	u.mmap(10, userMap{start: 0x1000, end: 0x2000, id: id(2), path: "/b"})
	u.mmap(10, userMap{start: 0x3000, end: 0x4000, id: id(3), path: "/c"})
	u.mmap(10, userMap{start: 0x1800, end: 0x3800, id: id(4), path: "/d"}) // replaces /b and /c
	u.mmap(99, userMap{start: 0x1000, end: 0x2000, id: id(5), path: "/e"}) // never sampled: ignored
	got := func(pid uint32) string {
		p := u.procs[pid]
		if p == nil {
			return "none"
		}
		var s []string
		for _, m := range p.maps {
			s = append(s, fmt.Sprintf("%x-%x%s", m.start, m.end, m.path))
		}
		return strings.Join(s, " ")
	}
	if g, w := got(10), "1800-3800/d 5000-6000/a"; g != w {
		t.Fatalf("after mmaps: %s, want %s", g, w)
	}
	if g := got(99); g != "none" {
		t.Fatalf("a process never sampled got mappings: %s", g)
	}
	u.fork(10, 11)
	u.mmap(11, userMap{start: 0x7000, end: 0x8000, id: id(6), path: "/f"})
	if g, w := got(11), "1800-3800/d 5000-6000/a 7000-8000/f"; g != w {
		t.Fatalf("child: %s, want %s", g, w)
	}
	if g, w := got(10), "1800-3800/d 5000-6000/a"; g != w {
		t.Fatalf("the child's mapping changed the parent: %s, want %s", g, w)
	}
	u.exec(11)
	if g := got(11); g != "" {
		t.Fatalf("after exec: %q, want no mappings", g)
	}
	u.exit(10)
	if u.procs[10] == nil || u.procs[10].exited.IsZero() {
		t.Fatal("an exited process is dropped at once (its last samples may still be in another CPU's ring)")
	}
	// find: the right mapping and file offset; none outside
	u.cur = &procMaps{maps: []userMap{{start: 0x1000, end: 0x2000, off: 0x3000, id: id(7), path: "/nonexistent"}}}
	if _, _, ok := u.find(0x2000); ok {
		t.Fatal("a pc past the end of the mapping was found")
	}
}

// The daemon runs as root: it opens a mapped file by path only when anyone
// may read it, it is a regular file reached without a symbolic link, and it
// is the file mapped (device and inode); otherwise nothing is loaded.
func TestLoadTableOpensOnlyTheMappedFile(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "prog")
	copyFile(t, self, path)
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	const gone = 0x3fffffff // no such process: /proc/PID/map_files fails, the path is tried
	m := userMap{start: 0x1000, end: 0x2000, path: path, id: fileID{unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino}}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := loadTable(gone, &m); err != nil {
		t.Fatalf("a readable file that is the one mapped: %v", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := loadTable(gone, &m); err == nil {
		t.Fatal("a file only its owner may read was opened by path")
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	other := m
	other.id.ino++
	if _, err := loadTable(gone, &other); err == nil {
		t.Fatal("a file with another inode than the one mapped was loaded")
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	viaLink := m
	viaLink.path = link
	if _, err := loadTable(gone, &viaLink); err == nil {
		t.Fatal("a path that is a symbolic link was followed")
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
