package outdir

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestOpenRefusesSharedDirectory: a directory others can write is
// refused, whatever links were planted in it.
func TestOpenRefusesSharedDirectory(t *testing.T) {
	for _, mode := range []os.FileMode{0o777, 0o1777, 0o775} {
		dir := filepath.Join(t.TempDir(), "shared")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, mode); err != nil {
			t.Fatal(err)
		}
		if d, err := Open(dir); err == nil || !strings.Contains(err.Error(), "writable by") {
			if d != nil {
				d.Close()
			}
			t.Fatalf("mode %o: %v, want a refusal", mode, err)
		}
	}
}

// TestOpenRefusesOthersDirectory: as root, a directory closed to others
// that belongs to another user is refused too.
func TestOpenRefusesOthersDirectory(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipped: making another user's directory needs root (CI runs as root)")
	}
	dir := filepath.Join(t.TempDir(), "theirs")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "belongs to uid 65534") {
		t.Fatalf("%v, want a refusal", err)
	}
}

// TestCreate: a missing directory is made 0700 (parents too), files are
// 0600 under umask 000, and a link or a 0644 file of that name left
// there is replaced, never followed.
func TestCreate(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	base := t.TempDir()
	victim := filepath.Join(base, "victim")
	if err := os.WriteFile(victim, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(base, "a", "b")
	d, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("%s: %v %v", path, fi.Mode(), err)
	}
	if err := os.Symlink(victim, filepath.Join(path, "log-rt")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(path, "log-gen"), []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"log-rt", "log-gen", "new"} {
		f, err := d.Create(n)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString("report"); err != nil {
			t.Fatal(err)
		}
		f.Close()
		fi, err := os.Lstat(filepath.Join(path, n))
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != FileMode {
			t.Fatalf("%s: %v %v, want a regular file 0600", n, fi.Mode(), err)
		}
	}
	if b, _ := os.ReadFile(victim); string(b) != "precious" {
		t.Fatalf("written through a link: %q", b)
	}
	if _, err := d.Create("../escape"); err == nil {
		t.Fatal("a name with a slash was accepted")
	}
}

// TestCreateFile: a path whose last component is a link, or a FIFO, is
// refused (promptly); a new file is 0600; an existing one of the user's
// is truncated.
func TestCreateFile(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(victim, link); err != nil {
		t.Fatal(err)
	}
	if _, err := CreateFile(link); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Fatalf("link: %v", err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := CreateFile(fifo); err == nil {
		t.Fatal("a FIFO was accepted")
	}
	for _, n := range []string{"new", "victim"} {
		f, err := CreateFile(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString("x")
		f.Close()
		b, _ := os.ReadFile(filepath.Join(dir, n))
		fi, _ := os.Stat(filepath.Join(dir, n))
		if string(b) != "x" || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %q mode %v", n, b, fi.Mode())
		}
	}
}
