package untrusted

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestOpenRefusesWithoutBlocking: a FIFO nobody writes, /dev/zero, a
// directory and a symbolic link to /dev/zero are refused at once, named by
// kind; a regular file (also through a symbolic link) opens and reads.
func TestOpenRefusesWithoutBlocking(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	zlink := filepath.Join(dir, "zero")
	if err := os.Symlink("/dev/zero", zlink); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		fifo:        "a named pipe (FIFO)",
		"/dev/zero": "a character device",
		zlink:       "a character device",
		dir:         "a directory",
	} {
		done := make(chan error, 1)
		go func() {
			f, _, err := Open(path)
			if f != nil {
				f.Close()
			}
			done <- err
		}()
		select {
		case err := <-done:
			var nr *NotRegularError
			if !errors.As(err, &nr) || nr.Kind() != want || !strings.Contains(err.Error(), path+": not a regular file ("+want+")") {
				t.Errorf("Open(%s) = %v, want a NotRegularError naming %q", path, err, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("Open(%s) blocked", path)
		}
	}
	reg := filepath.Join(dir, "reg")
	if err := os.WriteFile(reg, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(reg, link); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{reg, link} {
		f, fi, err := Open(p)
		if err != nil {
			t.Fatalf("Open(%s): %v", p, err)
		}
		b := make([]byte, 16)
		n, _ := f.Read(b)
		f.Close()
		if fi.Size() != 5 || string(b[:n]) != "hello" {
			t.Errorf("Open(%s): size %d, read %q", p, fi.Size(), b[:n])
		}
	}
	if _, _, err := Open(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Open(missing) = %v, want a not-exist error", err)
	}
}
