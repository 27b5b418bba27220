package a2n

import (
	"debug/elf"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"perfinsp/format/trace"
)

// TestResultPLT: Resolve marks every address of a module's .plt* sections
// PLT (the named stubs and the lazy-binding entry alike) and no address of
// .text, from a parsed module and from its table cache entry, for a
// program built here (lazy binding: a .plt with its first entry) and for
// the distribution's libc.
func TestResultPLT(t *testing.T) {
	_, prog := built(t, "-Wl,-z,lazy")
	cache := filepath.Join(t.TempDir(), "a2n")
	for _, path := range realModules(t, []string{prog, "/lib/x86_64-linux-gnu/libc.so.6"}) {
		f, err := elf.Open(path) // (a test's own input)
		if err != nil {
			t.Fatal(err)
		}
		fileOff := func(va uint64) uint64 {
			for _, p := range f.Progs {
				if p.Type == elf.PT_LOAD && va >= p.Vaddr && va < p.Vaddr+p.Filesz {
					return va - p.Vaddr + p.Off
				}
			}
			t.Fatalf("%s: %#x in no PT_LOAD", path, va)
			return 0
		}
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		const pid, base = 77, 0x7f0000000000
		for _, dir := range []string{"", cache, cache} { // parse, store, read the entry
			r := New(nil)
			r.Cache.Dir = dir
			r.Apply(&trace.Record{Major: trace.MajorMTE, Minor: trace.MTEProcess, Fixed: []uint64{pid, 1}, Str: "p"})
			r.Apply(&trace.Record{Major: trace.MajorMTE, Minor: trace.MTESegment, Fixed: []uint64{pid, base, uint64(fi.Size()), 0, 5}, Str: path})
			plts := 0
			for _, s := range f.Sections {
				in := strings.HasPrefix(s.Name, ".plt")
				if !in && s.Name != ".text" || s.Size == 0 {
					continue
				}
				step := uint64(8)
				if !in {
					step = 248
				}
				for va := s.Addr; va < s.Addr+s.Size; va += step {
					res := r.Resolve(pid, base+fileOff(va), false)
					if res.PLT != in {
						t.Fatalf("%s (cache %q): %s+%#x named %s: PLT %v", path, dir, s.Name, va-s.Addr, res.Symbol, res.PLT)
					}
					if in {
						plts++
					}
				}
			}
			if plts == 0 {
				t.Fatalf("%s: no PLT section", path)
			}
		}
		f.Close()
	}
}
