package daemonclient

import (
	"os"
	"path/filepath"
	"testing"
)

// Get completes a stream in place when it is named by another path (a
// link on the way): sameFile sees one file, where comparing names does not.
func TestSameFile(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "c.nrm2")
	if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(".", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if !sameFile(filepath.Join(dir, "link", "c.nrm2"), f) {
		t.Error("a name through a link is not the same file")
	}
	if sameFile(filepath.Join(dir, "other.nrm2"), f) || sameFile(filepath.Join(dir, "link", "other.nrm2"), f) {
		t.Error("another (missing) file is the same file")
	}
}
