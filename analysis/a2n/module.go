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
	"debug/gosym"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
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
	Err      error  // why the module could not be read (missing, not ELF, ...)
	Stripped bool   // no .symtab in the file (names from a debug file, .dynsym, .gnu_debugdata, .gopclntab, .eh_frame)
	Source   string // where the names came from: ".symtab", "debug file PATH", ".dynsym+.eh_frame", ...
	Warning  string // a name source present but unusable (a debug file that is a FIFO, bad .gnu_debugdata)
	tab      table
	loads    []elf.ProgHeader
	plt      []addrRange // the .plt* sections (PLT stubs, named or not)
	dw       *dwarf.Data
	dwPath   string // file holding DWARF, opened on first Line call
	// debugFiles: the separate debug files looked for, by build-id then
	// by .gnu_debuglink (the table cache's key: their identities)
	debugFiles []string
	names      map[string]string
	cus        []lineCU  // the DWARF's compilation units (Line)
	cuRanges   []cuRange // their address ranges, by address
	linesOK    bool
	lineMu     sync.Mutex
	// linesDir and linesKey: the table cache and the module's key there,
	// where its line table is kept (linecache.go); lineTab: that table.
	linesDir string
	linesKey []byte
	lineTab  *lineTable
	file     string // where the module was read from (Path under the cache's Root)
	idOnce   sync.Once
	buildID  string
	mappings []*mapping // the files mapped for the module (Release)
	inl      inlineInfo // the calls inlined, from DWARF (InlineCalls)
	// goLines: the .gopclntab of a Go binary without DWARF (goLine), read
	// at the first Line call then (goLinesRead)
	goLines     *gosym.Table
	goLinesRead bool
}

type lineRow struct {
	addr uint64
	file string
	line int
	end  bool // a sequence's end: the addresses from here have no line
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

// buildID returns the GNU build-id note of f, if any.
func buildID(f *elf.File) string {
	for _, p := range f.Progs {
		if p.Type != elf.PT_NOTE {
			continue
		}
		if p.Filesz > 1<<16 {
			continue // notes are small; the size is untrusted
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

// loadModule parses the module at path, or reads its entry of the table
// cache in dir ("": none; a parsed module is stored there).
func loadModule(path, dir string) *Module { return loadModuleFrom(path, dir, false) }

// loadModuleFrom is loadModule; mapTables maps a cached table rather than
// reading it (Cache.MapTables).
func loadModuleFrom(path, dir string, mapTables bool) *Module {
	m := &Module{Path: path, file: path}
	file, size, err := openChecked(path, MaxModuleSize, false)
	if err != nil {
		switch {
		case strings.HasPrefix(path, "/memfd:"):
			// memfd_create's memory: a file only while its process
			// holds it, never on disk
			m.Err = fmt.Errorf("%s: anonymous memory (memfd_create), gone with its process: not readable after the run", path)
		case errors.Is(err, os.ErrNotExist) && strings.HasSuffix(path, " (deleted)"):
			m.Err = fmt.Errorf("%s: deleted while its process ran", path)
		case errors.Is(err, os.ErrNotExist):
			m.Err = fmt.Errorf("%s: missing (deleted since tracing?)", path)
		default:
			m.Err = fmt.Errorf("module %w", err)
		}
		return m
	}
	defer file.Close()
	defer faultsPanic()()
	defer func() {
		// The file is untrusted input: a malformed ELF that trips a parser
		// (or a file cut short while mapped) costs this module its names,
		// never post its run.
		if p := recover(); p != nil {
			*m = Module{Path: path, file: path, Err: fmt.Errorf("%s: malformed ELF (%v)", path, p)}
		}
	}()
	fi, err := file.Stat()
	if err != nil {
		fi = nil
	}
	if dir != "" && fi != nil {
		m.linesDir, m.linesKey = dir, moduleKey(path, fi)
		if moduleFromCache(dir, path, fi, m, mapTables) {
			return m
		}
	}
	f, err := newELF(file, size, m)
	if err != nil {
		m.Err = fmt.Errorf("%s: %w", path, err)
		return m
	}
	ident := ""
	if fi != nil {
		ident = string(fileIdent(fi))
	}
	m.fromELF(f, true, ident)
	if m.dwPath == "" && f.Section(".debug_info") != nil {
		m.dwPath = path
	}
	if dir != "" && fi != nil {
		moduleToCache(dir, path, fi, m, m.debugFiles)
	}
	return m
}

// newELF parses an opened module or debug file, mapped when it can be
// (the mapping lives as long as m, whose tables hold names inside it).
func newELF(file *os.File, size int64, m *Module) (*elf.File, error) {
	if mf := mapFile(file, size); mf != nil {
		mf.release(m)
		return elf.NewFile(mf)
	}
	return elf.NewFile(file)
}

// fromELF fills m's tables from f: .symtab, else a build-id debug file's
// .symtab (if debugFiles), else .dynsym with the MiniDebugInfo .symtab and
// the .eh_frame function ranges; PLT stubs always (see elfsyms.go). ident
// is the file's identity (fileIdent; "" for an image not from a file).
func (m *Module) fromELF(f *elf.File, debugFiles bool, ident string) {
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			m.loads = append(m.loads, p.ProgHeader)
		}
	}
	raw, _ := elfSyms(f, false)
	m.Source = ".symtab"
	if len(raw) == 0 && debugFiles {
		id := buildID(f)
		m.debugFiles = debugCandidates(m.Path, m.file, id, f)
		for _, dbg := range m.debugFiles {
			df, size, err := openChecked(dbg, MaxModuleSize, false)
			if err != nil {
				if !errors.Is(err, os.ErrNotExist) {
					m.Warning = "debug file " + err.Error()
				}
				continue
			}
			ef, err := newELF(df, size, m)
			if err == nil && !sameBuild(f, id, ef, df) {
				m.Warning = "debug file " + dbg + " is not of this build (build-id or CRC differs), ignored"
				err = errBuild
			}
			used := false
			if err == nil {
				raw, _ = elfSyms(ef, false)
				if len(raw) > 0 {
					m.Source = "debug file " + dbg
					used = true
				}
				if ef.Section(".debug_info") != nil {
					m.dwPath = dbg
					used = true
				}
			}
			df.Close()
			if used {
				m.Warning = ""
				break
			}
		}
	}
	var fdes []fdeRange
	if len(raw) == 0 {
		m.Stripped = true
		m.Source = ".dynsym"
		raw, _ = elfSyms(f, true)
		mini, err := miniDebugInfo(f, ident)
		if err != nil {
			m.Warning = err.Error()
		} else if mini != nil {
			if more, _ := elfSyms(mini, false); len(more) > 0 {
				raw = append(raw, more...)
				m.Source = ".gnu_debugdata+.dynsym"
			}
		}
		if gofns := goFuncs(f); len(gofns) > 0 {
			raw = append(raw, gofns...)
			m.Source += "+.gopclntab"
		}
		fdes = fdeRanges(f)
		if len(fdes) > 0 {
			m.Source += "+.eh_frame"
		}
	}
	m.tab = buildTable(raw, pltStubs(f), fdes)
	if !m.Stripped {
		m.tab.syms = m.tab.syms.addUncovered(zeroSizeFDEs(raw, f))
	}
	m.plt = pltSections(f)
}

// DebugFiles are the separate debug files looked for the module (by
// build-id, then by .gnu_debuglink), whether found or not; none when the
// module has its own .symtab.
func (m *Module) DebugFiles() []string { return m.debugFiles }

// addrRange is [start, end) in a module's address space.
type addrRange struct{ start, end uint64 }

// pltSections are the address ranges of f's .plt, .plt.sec, .plt.got
// (and other .plt*) sections.
func pltSections(f *elf.File) []addrRange {
	var out []addrRange
	for _, s := range f.Sections {
		if strings.HasPrefix(s.Name, ".plt") && s.Type == elf.SHT_PROGBITS && s.Size > 0 && s.Addr+s.Size > s.Addr {
			out = append(out, addrRange{s.Addr, s.Addr + s.Size})
		}
	}
	return out
}

// InPLT says whether the virtual address va lies in one of the module's
// PLT sections: a stub A2N names name@plt, or the lazy-binding entry
// before them, which it names after a symbol before it (_init) or not at
// all.
func (m *Module) InPLT(va uint64) bool {
	for _, r := range m.plt {
		if va >= r.start && va < r.end {
			return true
		}
	}
	return false
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

// Symbol finds the symbol at a file offset. The name is the caller's own
// (not a view of the module's mapped file).
func (m *Module) Symbol(fileOff uint64) (s Sym, va uint64, ok bool) {
	va, ok = m.vaddr(fileOff)
	if !ok {
		return Sym{}, 0, false
	}
	// The name (of a parsed module) may lie in its mapped file, which may
	// have been cut short since it was loaded: a fault reading it leaves
	// the address unnamed.
	defer faultsPanic()()
	defer func() {
		if recover() != nil {
			s, ok = Sym{}, false
		}
	}()
	s, ok = m.tab.find(va)
	if !ok {
		return Sym{}, va, false
	}
	if s.Name == "" { // an .eh_frame function range without a symbol
		s.Name = fmt.Sprintf("%s+0x%x (function at 0x%x)", baseName(m.Path), fileOff-(va-s.Addr), s.Addr)
		return s, va, true
	}
	s.Name = strings.Clone(m.demangle(s.Name))
	return s, va, true
}

// SymbolStart is where the symbol Symbol finds at a file offset starts
// (a virtual address; ok false where Symbol finds none): offsets with one
// start have one name, so a caller naming many can name each start once
// (Symbol demangles and copies the name each time).
func (m *Module) SymbolStart(fileOff uint64) (start uint64, ok bool) {
	va, ok := m.vaddr(fileOff)
	if !ok {
		return 0, false
	}
	defer faultsPanic()()
	defer func() {
		if recover() != nil {
			start, ok = 0, false
		}
	}()
	s, ok := m.tab.find(va)
	return s.Addr, ok
}

// SymbolAt is the symbol at a virtual address of the module (what
// Symbol finds at the file offset that address has), its name demangled.
func (m *Module) SymbolAt(va uint64) (s Sym, ok bool) {
	if m.Err != nil {
		return Sym{}, false
	}
	defer faultsPanic()()
	defer func() {
		if recover() != nil {
			s, ok = Sym{}, false
		}
	}()
	if s, ok = m.tab.find(va); !ok || s.Name == "" {
		return Sym{}, false
	}
	s.Name = strings.Clone(m.demangle(s.Name))
	return s, true
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

// VAddr is the ELF virtual address of a file offset of the module (ok
// false when no PT_LOAD segment holds it).
func (m *Module) VAddr(fileOff uint64) (uint64, bool) { return m.vaddr(fileOff) }

// LoadSegment is the PT_LOAD segment holding a file offset: its virtual
// address, file offset and size in the file.
func (m *Module) LoadSegment(fileOff uint64) (vaddr, off, filesz uint64, ok bool) {
	for _, p := range m.loads {
		if fileOff >= p.Off && fileOff < p.Off+p.Filesz {
			return p.Vaddr, p.Off, p.Filesz, true
		}
	}
	return 0, 0, 0, false
}

// Code reads n bytes of the module's file at virtual address va (the
// instructions of a symbol, for an annotated disassembly); n is at most
// 1 MB.
func (m *Module) Code(va, n uint64) ([]byte, error) {
	if m.Err != nil {
		return nil, m.Err
	}
	if n > 1<<20 {
		return nil, fmt.Errorf("%s: %d bytes of code asked for (at most 1 MB)", m.Path, n)
	}
	for _, p := range m.loads {
		if va >= p.Vaddr && va+n <= p.Vaddr+p.Filesz {
			file, _, err := openChecked(m.file, MaxModuleSize, false)
			if err != nil {
				return nil, err
			}
			defer file.Close()
			b := make([]byte, n)
			if _, err := file.ReadAt(b, int64(va-p.Vaddr+p.Off)); err != nil {
				return nil, fmt.Errorf("%s: reading code at %#x: %w", m.Path, va, err)
			}
			return b, nil
		}
	}
	return nil, fmt.Errorf("%s: no code at %#x", m.Path, va)
}

// BuildID is the module's GNU build-id in hex ("" when it has none or the
// file cannot be read), read from the file on first use.
func (m *Module) BuildID() string {
	m.idOnce.Do(func() {
		if m.Err != nil || m.file == "" {
			return
		}
		file, _, err := openChecked(m.file, MaxModuleSize, false)
		if err != nil {
			return
		}
		defer file.Close()
		defer func() {
			if recover() != nil { // an untrusted file's malformed notes
				m.buildID = ""
			}
		}()
		if f, err := elf.NewFile(file); err == nil {
			m.buildID = buildID(f)
		}
	})
	return m.buildID
}

// Line returns the source file and line of a virtual address, from DWARF.
// With a table cache, from the module's whole line table kept there
// (linecache.go). Without, from the compilation unit whose ranges hold it
// (an index of the units' ranges made on first use), its line table read
// the first time one of its addresses is asked for.
func (m *Module) Line(va uint64) (string, int, bool) {
	m.lineMu.Lock()
	defer m.lineMu.Unlock()
	if !m.linesOK {
		m.linesOK = true
		if !m.cachedLines() {
			m.loadLineIndex()
		}
	}
	if m.lineTab != nil {
		return m.lineTab.lookup(va)
	}
	if len(m.cuRanges) == 0 {
		return m.goLine(va) // no DWARF: a Go binary's own table, if any
	}
	i := sort.Search(len(m.cuRanges), func(i int) bool { return m.cuRanges[i].low > va }) - 1
	if i < 0 || va >= m.cuRanges[i].high {
		return "", 0, false
	}
	cu := &m.cus[m.cuRanges[i].cu]
	if !cu.read {
		cu.read = true
		m.readLines(cu)
	}
	rows := cu.rows
	j := sort.Search(len(rows), func(j int) bool { return rows[j].addr > va }) - 1
	if j < 0 || rows[j].end {
		return "", 0, false
	}
	return rows[j].file, rows[j].line, true
}

// lineCU is a compilation unit of a module's DWARF: where its entry is,
// its directory, and its line table once read.
type lineCU struct {
	off     dwarf.Offset
	compDir string
	read    bool
	rows    []lineRow // by address
}

// cuRange is an address range of a compilation unit (an index into cus).
type cuRange struct {
	low, high uint64
	cu        int
}

// loadLineIndex opens the module's DWARF and indexes its compilation
// units by their address ranges.
func (m *Module) loadLineIndex() {
	if m.dwPath == "" {
		return
	}
	file, _, err := openChecked(m.dwPath, MaxModuleSize, false)
	if err != nil {
		return
	}
	defer file.Close()
	f, err := elf.NewFile(file)
	if err != nil {
		return
	}
	if m.dw, err = f.DWARF(); err != nil {
		return
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
		compDir, _ := e.Val(dwarf.AttrCompDir).(string)
		m.cus = append(m.cus, lineCU{off: e.Offset, compDir: compDir})
		if rs, err := m.dw.Ranges(e); err == nil {
			for _, rg := range rs {
				if rg[1] > rg[0] {
					m.cuRanges = append(m.cuRanges, cuRange{rg[0], rg[1], len(m.cus) - 1})
				}
			}
		}
		r.SkipChildren()
	}
	sort.Slice(m.cuRanges, func(i, j int) bool { return m.cuRanges[i].low < m.cuRanges[j].low })
}

// readLines reads a compilation unit's line table. A file named relative
// to where it was compiled gets that directory's path, which source
// viewers (pprof -list, callgrind_annotate) can open.
func (m *Module) readLines(cu *lineCU) {
	r := m.dw.Reader()
	r.Seek(cu.off)
	e, err := r.Next()
	if err != nil || e == nil {
		return
	}
	lr, err := m.dw.LineReader(e)
	if err != nil || lr == nil {
		return
	}
	var le dwarf.LineEntry
	var lastRel, lastAbs string
	seq := 0 // where the sequence read starts in rows
	for lr.Next(&le) == nil {
		if le.EndSequence {
			// rows at the end's address cover nothing
			for len(cu.rows) > seq && cu.rows[len(cu.rows)-1].addr >= le.Address {
				cu.rows = cu.rows[:len(cu.rows)-1]
			}
			cu.rows = append(cu.rows, lineRow{addr: le.Address, end: true})
			seq = len(cu.rows)
			continue
		}
		if le.File == nil {
			continue
		}
		name := le.File.Name
		if cu.compDir != "" && !filepath.IsAbs(name) {
			if name != lastRel {
				lastRel, lastAbs = name, filepath.Join(cu.compDir, name)
			}
			name = lastAbs
		}
		cu.rows = append(cu.rows, lineRow{addr: le.Address, file: name, line: le.Line})
	}
	// by address; a sequence's end before the rows of one starting there
	sort.SliceStable(cu.rows, func(i, j int) bool {
		a, b := &cu.rows[i], &cu.rows[j]
		return a.addr < b.addr || a.addr == b.addr && a.end && !b.end
	})
}

// Cache holds parsed modules by path; each is parsed once. It is safe for
// concurrent use: modules load outside its lock, each once (a second
// caller waits for the first one's load).
type Cache struct {
	mu      sync.Mutex
	mods    map[string]*Module
	loading map[string]chan struct{} // closed when the module is in mods
	sem     chan struct{}            // bounds the loads Prefetch runs
	notes   []string
	// Root, if set, is prepended to module paths (traces from another machine).
	Root string
	// Dir, if set, is the table cache: parsed tables are kept there and
	// read by later runs (tablecache.go).
	Dir string
	// mapped is when each module path was first mapped in the trace
	// (wall ns; changed.go).
	mapped map[string]int64
	// mappedFile is the file (device, inode) each module path held when
	// the trace first said so (MTE_FILE; changed.go).
	mappedFile map[string]fileID
	// MapTables maps the cached tables rather than reading them: for a
	// caller that names a few addresses of each module and releases it
	// (Module.Release), only the pages its searches touch are read.
	MapTables bool
}

// Module returns the parsed module at path.
func (c *Cache) Module(path string) *Module {
	c.mu.Lock()
	if m, ok := c.mods[path]; ok {
		c.mu.Unlock()
		return m
	}
	if ch, ok := c.loading[path]; ok {
		c.mu.Unlock()
		<-ch
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.mods[path]
	}
	if c.loading == nil {
		c.loading = map[string]chan struct{}{}
	}
	ch := make(chan struct{})
	c.loading[path] = ch
	c.mu.Unlock()
	file := path
	if c.Root != "" {
		file = filepath.Join(c.Root, filepath.Clean("/"+path)) // never climbs out of --root
	}
	m := loadModuleFrom(file, c.Dir, c.MapTables)
	m.Path = path
	c.mu.Lock()
	if c.mods == nil {
		c.mods = map[string]*Module{}
	}
	c.mods[path] = m
	delete(c.loading, path)
	c.mu.Unlock()
	close(ch)
	return m
}

// Prefetch starts loading the module at path in the background (at most
// GOMAXPROCS-1 loads at a time, at least one), so that a later Module
// finds it parsed; a module already loaded or loading is left alone.
func (c *Cache) Prefetch(path string) {
	c.mu.Lock()
	_, done := c.mods[path]
	_, busy := c.loading[path]
	if c.sem == nil {
		c.sem = make(chan struct{}, max(1, runtime.GOMAXPROCS(0)-1))
	}
	sem := c.sem
	c.mu.Unlock()
	if done || busy {
		return
	}
	go func() {
		sem <- struct{}{}
		defer func() { <-sem }()
		c.Module(path)
	}()
}

// vdso returns the vDSO image of kernel release rel (see vdso.go).
func (c *Cache) vdso(rel string) *Module {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mods == nil {
		c.mods = map[string]*Module{}
	}
	key := "[vdso] " + rel // not a path: no load of it can be in flight
	if m, ok := c.mods[key]; ok {
		return m
	}
	m := vdsoModule(rel)
	c.mods[key] = m
	return m
}

// note records a one-line warning about an input file.
func (c *Cache) note(msg string) {
	c.mu.Lock()
	c.notes = append(c.notes, msg)
	c.mu.Unlock()
}

// Problems lists, one line each, the modules that could not be read and
// the input files that were refused or unusable.
func (c *Cache) Problems() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := append([]string(nil), c.notes...)
	for _, m := range c.mods {
		if m.Err != nil {
			out = append(out, "module not read, its ticks show as module+offset: "+m.Err.Error())
		}
		if m.Warning != "" {
			out = append(out, m.Path+": "+m.Warning)
		}
		if msg := c.changedSinceMapped(m); msg != "" {
			out = append(out, msg)
		}
	}
	sort.Strings(out)
	return out
}
