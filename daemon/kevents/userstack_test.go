package kevents

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"perfinsp/analysis/unwind"
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
// may read it, it is a regular file reached without any symbolic link (the
// last component or a directory on the way: one could lead to a device
// node), and it is the file mapped (device and inode); otherwise nothing
// is loaded.
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
	// a symbolic link to a directory inside the path
	linkDir := filepath.Join(t.TempDir(), "linkdir")
	if err := os.Symlink(dir, linkDir); err != nil {
		t.Fatal(err)
	}
	viaDir := m
	viaDir.path = filepath.Join(linkDir, "prog")
	if _, err := loadTable(gone, &viaDir); err == nil {
		t.Fatal("a path through a symbolic link to a directory was followed")
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

// [vdso] is no file: its frames are unwound by the daemon's own vDSO image
// (the kernel maps the same one into every 64-bit process), found through
// the process's [vdso] mapping; a 32-bit task's sample is left to the
// frame-pointer walk.
func TestVDSOAndABI(t *testing.T) {
	u := newUserUnwinder()
	defer u.close()
	if u.vdso == nil {
		t.Fatal("the daemon's vDSO image gave no table")
	}
	u.cur, u.pid = &procMaps{maps: []userMap{{start: 0x7fff0000, end: 0x7fff2000, id: vdsoID, path: "[vdso]"}}}, 1
	tb, off, ok := u.find(0x7fff1234)
	if !ok || tb != u.vdso || off != 0x1234 {
		t.Fatalf("a pc in [vdso]: table %p (vdso %p), offset %#x, %v", tb, u.vdso, off, ok)
	}
	u.cur = nil
	// abi 1 (PERF_SAMPLE_REGS_ABI_32), then the registers and a stack copy
	b := make([]byte, 8+8*17+8+64+8)
	b[0] = 1
	var pm *procMaps
	pcs, _, _, ok, _ := u.unwindSample(1, b, []uint64{0xffffffff81000000}, []uint64{0x1000, 0x2000}, 127, false, &pm)
	if ok || len(pcs) != 1 {
		t.Fatalf("a 32-bit task's sample was unwound as x86-64: %x, %v", pcs, ok)
	}
}

// Stopping a session does not wait for a table load that blocks (an open
// on a user's FUSE mount can): tracing off must not hang on a file a
// traced process mapped.
func TestCloseDoesNotWaitForABlockedLoad(t *testing.T) {
	u := newUserUnwinder()
	block := make(chan struct{})
	defer close(block)
	started := make(chan struct{}, 2)
	u.load = func(uint32, *userMap) (*unwind.Table, error) {
		started <- struct{}{}
		<-block
		return nil, errors.New("blocked load")
	}
	u.mu.Lock()
	u.table(1, &userMap{start: 0x1000, end: 0x2000, id: fileID{8, 1, 42}, path: "/fuse/lib.so"})
	u.mu.Unlock()
	<-started
	done := make(chan struct{})
	go func() {
		u.close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("close waited for a table load that blocks")
	}
}
