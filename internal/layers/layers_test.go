package layers

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "perfinsp/"

// TestNoImportAcrossLayers parses every non-test Go file of the module and
// checks each of its imports of the module against Allowed and Apart.
func TestNoImportAcrossLayers(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root: %v", err)
	}
	files := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			n := d.Name()
			if path != root && (strings.HasPrefix(n, ".") || n == "testdata" || n == "build" || n == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		files++
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		rel = filepath.ToSlash(rel)
		for _, im := range f.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			if !strings.HasPrefix(p, module) {
				continue
			}
			if why := Check(rel, strings.TrimPrefix(p, module)); why != "" {
				t.Errorf("%s imports %s: %s", filepath.Join(rel, filepath.Base(path)), p, why)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("only %d Go files found under %s", files, root)
	}
}

// TestCheckRefuses: the rules refuse what they should (the test above
// passes on a tree that has no crossing, so the rules are checked here).
func TestCheckRefuses(t *testing.T) {
	for _, c := range []struct {
		from, to string
		ok       bool
	}{
		{"format/nrm2", "internal/untrusted", true},
		{"format/nrm2", "analysis/a2n", false},
		{"analysis/tprof", "libperfutil/control", false},
		{"libperfutil/control", "analysis/tprof", false},
		{"libperfutil/kmodbackend", "libperfutil/daemonclient", false},
		{"libperfutil/daemonclient", "libperfutil/kmodbackend/internal/abigen", false},
		{"libperfutil/backends", "libperfutil/kmodbackend", true},
		{"tools/hotspot", "daemon/kevents", false},
		{"daemon/kevents", "analysis/unwind", true},
		{"daemon/kevents", "tools/post", false},
		{"internal/procscan", "daemon/kevents", false},
		{"scripts/vmtest/pitest", "daemon/kevents", true},
	} {
		why := Check(c.from, c.to)
		if (why == "") != c.ok {
			t.Errorf("Check(%s, %s) = %q, want allowed=%v", c.from, c.to, why, c.ok)
		}
	}
}
