package a2n

import (
	"debug/elf"
	"path/filepath"
	"testing"
)

// SymbolStart gives the start of the symbol Symbol finds, and finds none
// where Symbol finds none, on parsed and cached tables of modules with
// .symtab and of stripped libraries (.dynsym, PLT stubs, .eh_frame
// ranges): offsets of one start then have one name, which is what a
// caller naming each start once relies on.
func TestSymbolStartAgreesWithSymbol(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a2n")
	for _, path := range realModules(t, append([]string{goBinary(t)}, benchLibs...)) {
		loadModule(path, dir) // stores the table: the next load reads it
		for _, m := range []*Module{loadModule(path, ""), loadModule(path, dir)} {
			if m.Err != nil {
				t.Fatalf("%s: %v", path, m.Err)
			}
			nameOf := map[uint64]string{}
			named, starts := 0, 0
			for _, p := range m.loads {
				if p.Flags&elf.PF_X == 0 {
					continue
				}
				stride := max(3, p.Filesz/200000)
				for off := p.Off; off < p.Off+p.Filesz+64; off += stride {
					s, _, ok := m.Symbol(off)
					start, sok := m.SymbolStart(off)
					if ok != sok || ok && start != s.Addr {
						t.Fatalf("%s (cached %v): file offset %#x: Symbol %+v %v, SymbolStart %#x %v", path, m.tab.c != nil, off, s, ok, start, sok)
					}
					if !ok {
						continue
					}
					named++
					if n, seen := nameOf[start]; !seen {
						nameOf[start] = s.Name
						starts++
					} else if n != s.Name {
						t.Fatalf("%s: start %#x named %q and %q", path, start, n, s.Name)
					}
				}
			}
			if named == 0 || starts < 2 {
				t.Fatalf("%s: %d probes named, %d starts", path, named, starts)
			}
			t.Logf("%s (cached %v): %d probes named, %d starts", path, m.tab.c != nil, named, starts)
		}
	}
}
