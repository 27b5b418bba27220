package a2n

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// textRange is the virtual address range of path's .text.
func textRange(t *testing.T, path string) (lo, hi uint64) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := f.Section(".text")
	if s == nil {
		t.Fatalf("%s has no .text", path)
	}
	return s.Addr, s.Addr + s.Size
}

// Source lines through the table cache are the lines read from the DWARF
// unit by unit, at every address of the code (every 3rd byte of the
// larger ones): an -O2 -g program, a Go program and glibc through its
// debug file (libc6-dbg). The first cached run reads the DWARF and writes
// the table, the second reads the table only (it never indexes the
// DWARF's units).
func TestCachedLinesAreTheDWARFs(t *testing.T) {
	dir := t.TempDir()
	prog := filepath.Join(dir, "prog")
	if out, err := exec.Command("gcc", "-O2", "-g", "-pthread", "-o", prog, "../../examples/itrace.c", "-lm").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	// a Go program: the runtime's units, DWARF compressed as the Go
	// linker writes it
	gosrc := filepath.Join(dir, "main.go")
	if err := os.WriteFile(gosrc, []byte("package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"hi\") }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	self := filepath.Join(dir, "goprog")
	gb := exec.Command("go", "build", "-o", self, gosrc)
	gb.Dir = dir
	gb.Env = append(os.Environ(), "GO111MODULE=off")
	if out, err := gb.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	libc := "/usr/lib/x86_64-linux-gnu/libc.so.6"
	for _, c := range []struct {
		path   string
		stride uint64
	}{{prog, 1}, {self, 3}, {libc, 3}} {
		plain := (&Cache{}).Module(c.path)
		if plain.Err != nil {
			t.Fatalf("%s: %v", c.path, plain.Err)
		}
		if c.path == libc && !strings.HasPrefix(plain.Source, "debug file") {
			needTool(t, "glibc's debug file", "apt-get install libc6-dbg")
		}
		cache := filepath.Join(dir, "cache-"+filepath.Base(c.path))
		lo, hi := textRange(t, c.path)
		for run := 0; run < 2; run++ {
			cached := (&Cache{Dir: cache}).Module(c.path)
			lines, differ := 0, 0
			for va := lo; va < hi; va += c.stride {
				f1, l1, ok1 := plain.Line(va)
				f2, l2, ok2 := cached.Line(va)
				if ok1 {
					lines++
				}
				if f1 != f2 || l1 != l2 || ok1 != ok2 {
					if differ++; differ <= 5 {
						t.Errorf("%s %#x: DWARF %s:%d %v, cached %s:%d %v", filepath.Base(c.path), va, f1, l1, ok1, f2, l2, ok2)
					}
				}
			}
			if indexed := len(cached.cus) > 0; indexed != (run == 0) {
				t.Fatalf("%s run %d: the DWARF's units indexed: %v", c.path, run, indexed)
			}
			if cached.lineTab == nil || lines < int((hi-lo)/c.stride/2) || differ > 0 {
				t.Fatalf("%s run %d: %d of %d addresses with a line, %d differ (cached table: %v)", c.path, run, lines, (hi-lo)/c.stride, differ, cached.lineTab != nil)
			}
			t.Logf("%s run %d: %d addresses with lines, the same", filepath.Base(c.path), run, lines)
			if run == 1 && c.path == self {
				truncatedTable(t, cached, cache, hi-1)
			}
		}
	}
}

// truncatedTable checks that m's line table, read from the cache in dir,
// is mapped, and that once the cache file shrinks under the mapping a
// lookup (at va, in the part cut off) gives no line instead of a fault.
func truncatedTable(t *testing.T, m *Module, dir string, va uint64) {
	t.Helper()
	if !m.lineTab.mapped {
		t.Fatal("the cached line table was read, not mapped")
	}
	tabs, _ := filepath.Glob(filepath.Join(dir, "*.tab"))
	if len(tabs) == 0 {
		t.Fatalf("no table in %s", dir)
	}
	for _, p := range tabs {
		if err := os.Truncate(p, 4096); err != nil {
			t.Fatal(err)
		}
	}
	if f, l, ok := m.Line(va); ok {
		t.Fatalf("%#x in a table cut short: %s:%d", va, f, l)
	}
}
