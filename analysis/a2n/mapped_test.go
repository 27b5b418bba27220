package a2n

import (
	"debug/elf"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A module file is mapped: one cut short after it was loaded (a rebuild
// truncating it in place) makes reading its names fault. The lookup must
// leave the address unnamed, not crash post.
func TestMappedModuleCutShortAfterLoad(t *testing.T) {
	// A copy of a library with named functions (liblzma comes with every
	// Debian system: dpkg needs it).
	const lib = "/usr/lib/x86_64-linux-gnu/liblzma.so.5"
	path := filepath.Join(t.TempDir(), "module")
	src, err := os.Open(lib)
	if err != nil {
		t.Fatalf("%v: install liblzma5", err)
	}
	dst, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	src.Close()
	m := loadModule(path, "")
	if m.Err != nil {
		t.Fatal(m.Err)
	}
	// A named function's file offset (not a PLT stub: their names are
	// made, not read from the file).
	var off uint64
	var want string
	for _, s := range m.tab.syms {
		if s.Name != "" && s.Size > 0 && !strings.HasSuffix(s.Name, "@plt") {
			for _, p := range m.loads {
				if p.Flags&elf.PF_X != 0 && s.Addr >= p.Vaddr && s.Addr < p.Vaddr+p.Filesz {
					off, want = s.Addr-p.Vaddr+p.Off, strings.Clone(s.Name) // not a view of the file
				}
			}
		}
		if want != "" {
			break
		}
	}
	if want == "" {
		t.Fatalf("no named function in %s (%d symbols, %d loads, %s)", lib, len(m.tab.syms), len(m.loads), m.Source)
	}
	if s, _, ok := m.Symbol(off); !ok || s.Name != want {
		t.Fatalf("before the cut: got %q (%v), want %q", s.Name, ok, want)
	}
	// A name already returned is the caller's own: it survives the cut.
	s0, _, _ := m.Symbol(off)
	if err := dst.Truncate(0); err != nil {
		t.Fatal(err)
	}
	dst.Close()
	m.names = nil // the demangling cache would answer without reading the file
	s, _, ok := m.Symbol(off)
	if ok {
		t.Fatalf("after the file was cut to 0 bytes, the lookup still gave %q", s.Name)
	}
	if s0.Name != want {
		t.Fatalf("a name returned before the cut changed to %q", s0.Name)
	}
}

// TestModuleRelease: Release unmaps a parsed module's file at once (a
// caller naming a few addresses in each of many modules holds one
// module's pages at a time); the names found before stay the caller's.
func TestModuleRelease(t *testing.T) {
	const lib = "/usr/lib/x86_64-linux-gnu/liblzma.so.5"
	path := filepath.Join(t.TempDir(), "module-release")
	data, err := os.ReadFile(lib)
	if err != nil {
		t.Fatalf("%v: install liblzma5", err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	mapped := func() bool {
		maps, err := os.ReadFile("/proc/self/maps")
		if err != nil {
			t.Fatal(err)
		}
		return strings.Contains(string(maps), path)
	}
	m := loadModule(path, "")
	if m.Err != nil {
		t.Fatal(m.Err)
	}
	if !mapped() {
		t.Fatalf("%s is not mapped after its load: nothing to release", path)
	}
	var off uint64
	for _, s := range m.tab.syms {
		if s.Name != "" && s.Size > 0 && !strings.HasSuffix(s.Name, "@plt") {
			for _, p := range m.loads {
				if p.Flags&elf.PF_X != 0 && s.Addr >= p.Vaddr && s.Addr < p.Vaddr+p.Filesz {
					off = s.Addr - p.Vaddr + p.Off
				}
			}
		}
		if off != 0 {
			break
		}
	}
	s, _, ok := m.Symbol(off)
	if !ok || s.Name == "" {
		t.Fatalf("no name at file offset %#x of %s", off, lib)
	}
	want := strings.Clone(s.Name)
	m.Release()
	if mapped() {
		t.Errorf("%s still mapped after Release", path)
	}
	if s.Name != want {
		t.Errorf("a name found before Release reads %q after it, want %q", s.Name, want)
	}
	m.Release() // twice: nothing more to unmap
}
