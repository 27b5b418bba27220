// Package a2n is address-to-name: it turns (pid, address, time) into
// process, module, symbol, offset and, where DWARF exists, source file and
// line. It follows the MTE records of a trace in time order, so each
// address resolves against the mappings — and the JIT code — that were
// there at the record's time. Each module's tables are parsed once and
// cached; lookups are binary searches.
package a2n

import (
	"bytes"
	"cmp"
	"debug/dwarf"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/ianlancetaylor/demangle"
)

// Sym is one symbol: a start address and size in the module's address
// space (ELF virtual addresses, or absolute addresses for kernel and JIT).
type Sym struct {
	Addr uint64
	Size uint64
	Name string
}

// symtab is a sorted symbol table.
type symtab []Sym

func (t symtab) find(addr uint64) (Sym, bool) {
	i := sort.Search(len(t), func(i int) bool { return t[i].Addr > addr }) - 1
	if i < 0 {
		return Sym{}, false
	}
	s := t[i]
	if s.Size > 0 && addr >= s.Addr+s.Size {
		// Inside a gap after a sized symbol: no symbol owns it.
		return Sym{}, false
	}
	return s, true
}

func (t symtab) sortDedup() symtab {
	slices.SortFunc(t, func(a, b Sym) int {
		if a.Addr != b.Addr {
			return cmp.Compare(a.Addr, b.Addr)
		}
		return cmp.Compare(b.Size, a.Size) // the sized one wins at equal addresses
	})
	out := t[:0]
	for i, s := range t {
		if i > 0 && s.Addr == out[len(out)-1].Addr {
			continue
		}
		out = append(out, s)
	}
	return out
}

// Module is one parsed ELF file.
type Module struct {
	Path     string
	Err      error // why the module could not be read (missing, not ELF, ...)
	Stripped bool  // no .symtab: only .dynsym was available
	syms     symtab
	loads    []elf.ProgHeader
	dw       *dwarf.Data
	dwPath   string // file holding DWARF, opened on first Line call
	names    map[string]string
	lines    []lineRow
	linesOK  bool
	lineMu   sync.Mutex
}

type lineRow struct {
	addr uint64
	file string
	line int
}

// demangled returns a readable name for C++ and Rust symbols.
func demangled(name string) string {
	if strings.HasPrefix(name, "_Z") || strings.HasPrefix(name, "_R") || strings.HasPrefix(name, "__Z") {
		if d, err := demangle.ToString(name, demangle.NoParams); err == nil {
			return d
		}
	}
	return name
}

// elfSyms reads the function symbols of .symtab (or .dynsym) directly from
// the section bytes: debug/elf's Symbols allocates every symbol and name,
// which dominates post's start-up on large binaries. Names are slices of
// one string holding the string table.
func elfSyms(f *elf.File, dyn bool) (symtab, error) {
	typ := elf.SHT_SYMTAB
	if dyn {
		typ = elf.SHT_DYNSYM
	}
	var sec *elf.Section
	for _, s := range f.Sections {
		if s.Type == typ {
			sec = s
			break
		}
	}
	if sec == nil || sec.Type == elf.SHT_NOBITS || int(sec.Link) >= len(f.Sections) {
		return nil, errors.New("no symbol table")
	}
	if f.Class != elf.ELFCLASS64 {
		return elfSymsGeneric(f, dyn)
	}
	data, err := sec.Data()
	if err != nil {
		return nil, err
	}
	strb, err := f.Sections[sec.Link].Data()
	if err != nil {
		return nil, err
	}
	strs := string(strb)
	bo := f.ByteOrder
	const entSize = 24 // Elf64_Sym
	out := make(symtab, 0, len(data)/entSize/2)
	for off := entSize; off+entSize <= len(data); off += entSize {
		e := data[off : off+entSize]
		info := e[4]
		st := elf.SymType(info & 0xf)
		if st != elf.STT_FUNC && st != elf.STT_GNU_IFUNC {
			continue
		}
		shndx := bo.Uint16(e[6:])
		value := bo.Uint64(e[8:])
		if value == 0 || elf.SectionIndex(shndx) == elf.SHN_UNDEF {
			continue
		}
		nameOff := int(bo.Uint32(e[0:]))
		if nameOff >= len(strs) {
			continue
		}
		end := strings.IndexByte(strs[nameOff:], 0)
		if end < 0 {
			continue
		}
		name := strs[nameOff : nameOff+end]
		if i := strings.IndexByte(name, '@'); i > 0 {
			name = name[:i] // drop symbol versions
		}
		out = append(out, Sym{Addr: value, Size: bo.Uint64(e[16:]), Name: name})
	}
	return out, nil
}

func elfSymsGeneric(f *elf.File, dyn bool) (symtab, error) {
	var syms []elf.Symbol
	var err error
	if dyn {
		syms, err = f.DynamicSymbols()
	} else {
		syms, err = f.Symbols()
	}
	if err != nil {
		return nil, err
	}
	var out symtab
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) != elf.STT_FUNC && elf.ST_TYPE(s.Info) != elf.STT_GNU_IFUNC {
			continue
		}
		if s.Value == 0 || s.Section == elf.SHN_UNDEF {
			continue
		}
		name := s.Name
		if i := strings.IndexByte(name, '@'); i > 0 {
			name = name[:i]
		}
		out = append(out, Sym{Addr: s.Value, Size: s.Size, Name: name})
	}
	return out, nil
}

// buildID returns the GNU build-id note of f, if any.
func buildID(f *elf.File) string {
	for _, p := range f.Progs {
		if p.Type != elf.PT_NOTE {
			continue
		}
		b := make([]byte, p.Filesz)
		if _, err := p.ReadAt(b, 0); err != nil {
			continue
		}
		for len(b) >= 12 {
			nsz := int(f.ByteOrder.Uint32(b))
			dsz := int(f.ByteOrder.Uint32(b[4:]))
			typ := f.ByteOrder.Uint32(b[8:])
			nameEnd := 12 + (nsz+3)&^3
			descEnd := nameEnd + (dsz+3)&^3
			if nsz < 0 || dsz < 0 || descEnd > len(b) || nameEnd > len(b) {
				break
			}
			if typ == 3 && nsz == 4 && bytes.Equal(b[12:15], []byte("GNU")) {
				return hex.EncodeToString(b[nameEnd : nameEnd+dsz])
			}
			b = b[descEnd:]
		}
	}
	return ""
}

// DebugRoot is where separate debug files are looked up by build-id
// (<root>/.build-id/xx/rest.debug).
var DebugRoot = "/usr/lib/debug"

func loadModule(path string) *Module {
	m := &Module{Path: path}
	f, err := elf.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			m.Err = fmt.Errorf("%s: missing (deleted since tracing?)", path)
		} else {
			m.Err = fmt.Errorf("%s: %w", path, err)
		}
		return m
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			m.loads = append(m.loads, p.ProgHeader)
		}
	}
	syms, err := elfSyms(f, false)
	if err != nil || len(syms) == 0 {
		// No .symtab: a separate debug file by build-id, else .dynsym.
		if id := buildID(f); len(id) > 2 {
			dbg := filepath.Join(DebugRoot, ".build-id", id[:2], id[2:]+".debug")
			if df, err := elf.Open(dbg); err == nil {
				syms, _ = elfSyms(df, false)
				if df.Section(".debug_info") != nil {
					m.dwPath = dbg
				}
				df.Close()
			}
		}
		if len(syms) == 0 {
			m.Stripped = true
			syms, _ = elfSyms(f, true)
		}
	}
	if m.dwPath == "" && f.Section(".debug_info") != nil {
		m.dwPath = path
	}
	m.syms = syms.sortDedup()
	return m
}

// vaddr converts a file offset to the module's virtual address through its
// PT_LOAD program headers (PIE executables and shared libraries are linked
// at addresses unrelated to where they are mapped).
func (m *Module) vaddr(off uint64) (uint64, bool) {
	for _, p := range m.loads {
		if off >= p.Off && off < p.Off+p.Filesz {
			return off - p.Off + p.Vaddr, true
		}
	}
	return 0, false
}

// Symbol finds the symbol at a file offset.
func (m *Module) Symbol(fileOff uint64) (Sym, uint64, bool) {
	va, ok := m.vaddr(fileOff)
	if !ok {
		return Sym{}, 0, false
	}
	s, ok := m.syms.find(va)
	if !ok {
		return Sym{}, va, false
	}
	s.Name = m.demangle(s.Name)
	return s, va, true
}

// demangle demangles a symbol name once (names are demangled on first use,
// not at load: most of a module's symbols are never hit).
func (m *Module) demangle(name string) string {
	if !strings.HasPrefix(name, "_Z") && !strings.HasPrefix(name, "_R") && !strings.HasPrefix(name, "__Z") {
		return name
	}
	m.lineMu.Lock()
	defer m.lineMu.Unlock()
	if d, ok := m.names[name]; ok {
		return d
	}
	if m.names == nil {
		m.names = map[string]string{}
	}
	d := demangled(name)
	m.names[name] = d
	return d
}

// Line returns the source file and line of a virtual address, from DWARF.
func (m *Module) Line(va uint64) (string, int, bool) {
	m.lineMu.Lock()
	defer m.lineMu.Unlock()
	if !m.linesOK {
		m.linesOK = true
		if m.dwPath == "" {
			return "", 0, false
		}
		f, err := elf.Open(m.dwPath)
		if err != nil {
			return "", 0, false
		}
		m.dw, err = f.DWARF()
		f.Close()
		if err != nil {
			return "", 0, false
		}
		r := m.dw.Reader()
		for {
			e, err := r.Next()
			if err != nil || e == nil {
				break
			}
			if e.Tag != dwarf.TagCompileUnit {
				r.SkipChildren()
				continue
			}
			lr, err := m.dw.LineReader(e)
			if err != nil || lr == nil {
				continue
			}
			var le dwarf.LineEntry
			for lr.Next(&le) == nil {
				if le.File != nil && !le.EndSequence {
					m.lines = append(m.lines, lineRow{le.Address, le.File.Name, le.Line})
				}
			}
		}
		sort.Slice(m.lines, func(i, j int) bool { return m.lines[i].addr < m.lines[j].addr })
	}
	i := sort.Search(len(m.lines), func(i int) bool { return m.lines[i].addr > va }) - 1
	if i < 0 {
		return "", 0, false
	}
	return m.lines[i].file, m.lines[i].line, true
}

// Cache holds parsed modules by path; each is parsed once.
type Cache struct {
	mu   sync.Mutex
	mods map[string]*Module
	// Root, if set, is prepended to module paths (traces from another machine).
	Root string
}

// Module returns the parsed module at path.
func (c *Cache) Module(path string) *Module {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mods == nil {
		c.mods = map[string]*Module{}
	}
	if m, ok := c.mods[path]; ok {
		return m
	}
	m := loadModule(filepath.Join(c.Root, path))
	m.Path = path
	c.mods[path] = m
	return m
}

// Problems lists the modules that could not be read.
func (c *Cache) Problems() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, m := range c.mods {
		if m.Err != nil {
			out = append(out, m.Err.Error())
		}
	}
	sort.Strings(out)
	return out
}
