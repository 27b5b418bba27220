package a2n

import (
	"bytes"
	"cmp"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"unsafe"
)

// How a module's addresses get their names, best first:
//
//  1. Sized symbols (STT_FUNC, STT_GNU_IFUNC, and STT_NOTYPE in executable
//     sections) own [value, value+size). Of several at one address (aliases)
//     the name a user expects wins: unprefixed (pread, not __libc_pread or
//     __GI___pread), the default symbol version, global before weak before
//     local, then the shorter name.
//  2. PLT stubs are named name@plt from the PLT relocations, as perf does.
//  3. .eh_frame FDE ranges (modules without .symtab) group the remaining
//     addresses by function: named by a zero-size symbol starting there if
//     one exists, else "module+0xoff (function at 0xaddr)".
//  4. A zero-size STT_NOTYPE symbol (an assembler label such as ld.so's
//     _start) names what nothing else does, from its address up to the next
//     named range or the end of its section.
//
// A zero-size STT_FUNC symbol (_init in many libraries) owns no address.

// rawSym is a symbol as read from a symbol table, before ownership.
type rawSym struct {
	addr, size uint64
	secEnd     uint64 // end of the section holding it (zero-size labels stop there)
	name       string
	rank       uint32 // alias preference: lower is better
	notype     bool
}

// aliasRank orders names at one address: unprefixed, default version,
// global, short.
func aliasRank(name string, bind elf.SymBind, hidden bool) uint32 {
	var r uint32
	if strings.HasPrefix(name, "_") && !strings.HasPrefix(name, "_Z") && !strings.HasPrefix(name, "_R") && !strings.HasPrefix(name, "__Z") {
		r |= 1 << 31
	}
	if hidden {
		r |= 1 << 30
	}
	switch bind {
	case elf.STB_GLOBAL:
	case elf.STB_WEAK:
		r |= 1 << 28
	default:
		r |= 2 << 28
	}
	return r | uint32(min(len(name), 1<<20))
}

type secInfo struct {
	exec bool
	end  uint64
}

func sectionInfo(f *elf.File) []secInfo {
	out := make([]secInfo, len(f.Sections))
	for i, s := range f.Sections {
		out[i] = secInfo{exec: s.Flags&elf.SHF_EXECINSTR != 0, end: s.Addr + s.Size}
	}
	return out
}

// keepSym says whether a symbol of type st in section shndx names code, and
// the end of its section.
func keepSym(st elf.SymType, shndx elf.SectionIndex, value uint64, name string, secs []secInfo) (bool, uint64) {
	if value == 0 || shndx == elf.SHN_UNDEF || name == "" {
		return false, 0
	}
	var end uint64
	if int(shndx) < len(secs) {
		end = secs[shndx].end
	}
	switch st {
	case elf.STT_FUNC, elf.STT_GNU_IFUNC:
		return true, end
	case elf.STT_NOTYPE:
		// Assembler labels in code; not local labels (.L*) or mapping
		// symbols ($x, $d of ARM).
		if int(shndx) >= len(secs) || !secs[shndx].exec || strings.HasPrefix(name, ".L") || name[0] == '$' {
			return false, 0
		}
		return value < end, end
	}
	return false, 0
}

// splitVersion separates "name@VER" (hidden) and "name@@VER" (default).
func splitVersion(name string) (string, bool) {
	i := strings.IndexByte(name, '@')
	if i <= 0 {
		return name, false
	}
	return name[:i], !strings.HasPrefix(name[i:], "@@")
}

// elfSyms reads the code symbols of .symtab (or .dynsym) directly from the
// section bytes: debug/elf's Symbols allocates every symbol and name, which
// dominates post's start-up on large binaries. Names are slices of one
// string holding the string table.
func elfSyms(f *elf.File, dyn bool) ([]rawSym, error) {
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
	secs := sectionInfo(f)
	if f.Class != elf.ELFCLASS64 {
		return elfSymsGeneric(f, dyn, secs)
	}
	data, err := sectionData(sec)
	if err != nil {
		return nil, err
	}
	strb, err := sectionData(f.Sections[sec.Link])
	if err != nil {
		return nil, err
	}
	var versym []byte // .gnu.version: bit 15 of an entry marks a hidden (non-default) version
	if dyn {
		for _, s := range f.Sections {
			if s.Type == elf.SHT_GNU_VERSYM {
				versym, _ = sectionData(s)
				break
			}
		}
	}
	strs := unsafe.String(unsafe.SliceData(strb), len(strb)) // names are slices of it, no copy
	bo := f.ByteOrder
	const entSize = 24 // Elf64_Sym
	// Sized once, for the symbols of the kept types (a slice grown by
	// append is copied, and each copy is fresh memory).
	nkeep := 0
	for off := entSize + 4; off < len(data); off += entSize {
		if st := elf.SymType(data[off] & 0xf); st == elf.STT_FUNC || st == elf.STT_GNU_IFUNC || st == elf.STT_NOTYPE {
			nkeep++
		}
	}
	out := make([]rawSym, 0, nkeep)
	for off, idx := entSize, 1; off+entSize <= len(data); off, idx = off+entSize, idx+1 {
		e := data[off : off+entSize]
		info := e[4]
		st := elf.SymType(info & 0xf)
		if st != elf.STT_FUNC && st != elf.STT_GNU_IFUNC && st != elf.STT_NOTYPE {
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
		name, hidden := splitVersion(strs[nameOff : nameOff+end])
		value := bo.Uint64(e[8:])
		keep, secEnd := keepSym(st, elf.SectionIndex(bo.Uint16(e[6:])), value, name, secs)
		if !keep {
			continue
		}
		if 2*idx+1 < len(versym) && bo.Uint16(versym[2*idx:])&0x8000 != 0 {
			hidden = true
		}
		out = append(out, rawSym{
			addr: value, size: bo.Uint64(e[16:]), secEnd: secEnd, name: name,
			rank: aliasRank(name, elf.SymBind(info>>4), hidden), notype: st == elf.STT_NOTYPE,
		})
	}
	return out, nil
}

func elfSymsGeneric(f *elf.File, dyn bool, secs []secInfo) ([]rawSym, error) {
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
	var out []rawSym
	for _, s := range syms {
		st := elf.ST_TYPE(s.Info)
		name, hidden := splitVersion(s.Name)
		keep, secEnd := keepSym(st, s.Section, s.Value, name, secs)
		if !keep {
			continue
		}
		out = append(out, rawSym{addr: s.Value, size: s.Size, secEnd: secEnd, name: name,
			rank: aliasRank(name, elf.ST_BIND(s.Info), hidden), notype: st == elf.STT_NOTYPE})
	}
	return out, nil
}

// pltStubs names the PLT entries from the PLT relocations: entry i of
// .rela.plt is the i-th stub of .plt.sec (IBT layout) or of .plt after its
// header. x86-64 and AArch64, as perf.
func pltStubs(f *elf.File) []Sym {
	var jumpSlot uint32
	var hdr uint64
	switch f.Machine {
	case elf.EM_X86_64:
		jumpSlot, hdr = uint32(elf.R_X86_64_JMP_SLOT), 16
	case elf.EM_AARCH64:
		jumpSlot, hdr = uint32(elf.R_AARCH64_JUMP_SLOT), 32
	default:
		return nil
	}
	rela := f.Section(".rela.plt")
	if f.Class != elf.ELFCLASS64 || rela == nil || rela.Type != elf.SHT_RELA || int(rela.Link) >= len(f.Sections) {
		return nil
	}
	plt := f.Section(".plt.sec")
	base := uint64(0)
	if plt != nil {
		base = plt.Addr
	} else if plt = f.Section(".plt"); plt != nil {
		base = plt.Addr + hdr
	} else {
		return nil
	}
	dynsym := f.Sections[rela.Link]
	if dynsym.Type != elf.SHT_DYNSYM || int(dynsym.Link) >= len(f.Sections) {
		return nil
	}
	relData, err := sectionData(rela)
	if err != nil {
		return nil
	}
	symData, err := sectionData(dynsym)
	if err != nil {
		return nil
	}
	strb, err := sectionData(f.Sections[dynsym.Link])
	if err != nil {
		return nil
	}
	bo := f.ByteOrder
	end := plt.Addr + plt.Size
	var out []Sym
	if f.Machine == elf.EM_X86_64 {
		if named := pltBySlot(f, plt, base, relData, symData, strb); named != nil {
			return append(named, pltGotStubs(f, symData, strb)...)
		}
	}
	for i := 0; (i+1)*24 <= len(relData); i++ {
		addr := base + uint64(i)*16
		if addr+16 > end || addr < base {
			break
		}
		info := bo.Uint64(relData[i*24+8:])
		sym := info >> 32
		if uint32(info) != jumpSlot || sym == 0 || sym >= uint64(len(symData)/24) {
			continue
		}
		nameOff := uint64(bo.Uint32(symData[sym*24:]))
		if nameOff >= uint64(len(strb)) {
			continue
		}
		name := strb[nameOff:]
		if n := slices.Index(name, 0); n >= 0 {
			name = name[:n]
		}
		if len(name) == 0 {
			continue
		}
		out = append(out, Sym{Addr: addr, Size: 16, Name: string(name) + "@plt"})
	}
	if f.Machine == elf.EM_X86_64 {
		out = append(out, pltGotStubs(f, symData, strb)...)
	}
	return out
}

// pltBySlot names the x86-64 PLT stubs from base in plt by the GOT slot
// each jumps through ("jmp *disp(%rip)", after an endbr64 and a bnd
// prefix in .plt.sec), as objdump does: the .rela.plt relocation of that
// slot names it. Entry i of .rela.plt is not stub i where the PLT holds
// IRELATIVE stubs (calls of a library's own IFUNCs: libc's memcpy, strlen
// ...), whose relocations the linker puts after the others. An IRELATIVE
// stub is named after the IFUNC symbol at the relocation's addend (the
// resolver, memcpy@plt), or *ABS*+0xaddend@plt as objdump and perf name it.
// nil when no stub decodes so.
func pltBySlot(f *elf.File, plt *elf.Section, base uint64, relData, symData, strb []byte) []Sym {
	if plt.Size > 1<<22 || base < plt.Addr {
		return nil
	}
	code, err := sectionData(plt)
	if err != nil {
		return nil
	}
	bo := f.ByteOrder
	slots := map[uint64]uint64{} // GOT slot -> stub address
	for off := base - plt.Addr; off+16 <= uint64(len(code)); off += 16 {
		e := code[off : off+16]
		j := bytes.Index(e, []byte{0xff, 0x25})
		if j < 0 || j > 5 || j+6 > len(e) {
			continue
		}
		at := plt.Addr + off + uint64(j+6)
		slots[at+uint64(int64(int32(bo.Uint32(e[j+2:]))))] = plt.Addr + off
	}
	if len(slots) == 0 {
		return nil
	}
	symName := func(sym uint64) string {
		if sym == 0 || sym >= uint64(len(symData)/24) {
			return ""
		}
		nameOff := uint64(bo.Uint32(symData[sym*24:]))
		if nameOff >= uint64(len(strb)) {
			return ""
		}
		name := strb[nameOff:]
		if n := bytes.IndexByte(name, 0); n >= 0 {
			name = name[:n]
		}
		return string(name)
	}
	var ifuncs map[uint64]rawSym // IFUNC symbols of .dynsym by value (IRELATIVE stubs)
	var out []Sym
	for i := 0; (i+1)*24 <= len(relData); i++ {
		r := relData[i*24:]
		addr, ok := slots[bo.Uint64(r)]
		if !ok {
			continue
		}
		info := bo.Uint64(r[8:])
		name := ""
		switch uint32(info) {
		case uint32(elf.R_X86_64_JMP_SLOT):
			name = symName(info >> 32)
		case uint32(elf.R_X86_64_IRELATIVE):
			if ifuncs == nil {
				ifuncs = map[uint64]rawSym{}
				if dyn, err := elfSyms(f, true); err == nil {
					for _, s := range dyn {
						if o, ok := ifuncs[s.addr]; s.size > 0 && (!ok || s.rank < o.rank) {
							ifuncs[s.addr] = s
						}
					}
				}
			}
			addend := bo.Uint64(r[16:])
			if s, ok := ifuncs[addend]; ok {
				name = s.name
			} else {
				name = fmt.Sprintf("*ABS*+0x%x", addend)
			}
		}
		if name != "" {
			out = append(out, Sym{Addr: addr, Size: 16, Name: name + "@plt"})
		}
	}
	return out
}

// pltGotStubs names the x86-64 .plt.got entries (calls through a GOT slot
// the program also reads, e.g. a function whose address is taken): each
// is "jmp *disp(%rip)"; the GLOB_DAT relocation of the slot it jumps
// through names it (what binutils and perf show as name@plt).
func pltGotStubs(f *elf.File, symData, strb []byte) []Sym {
	sec := f.Section(".plt.got")
	rela := f.Section(".rela.dyn")
	if sec == nil || rela == nil || sec.Type != elf.SHT_PROGBITS || rela.Type != elf.SHT_RELA || sec.Size > 1<<20 {
		return nil
	}
	code, err := sectionData(sec)
	if err != nil {
		return nil
	}
	bo := f.ByteOrder
	ent := int(sec.Entsize)
	if ent != 8 && ent != 16 {
		ent = 8
	}
	type stub struct{ addr, sym uint64 }
	slots := map[uint64]*stub{} // GOT address -> its stub
	var stubs []*stub
	for off := 0; off+ent <= len(code); off += ent {
		e := code[off : off+ent]
		j := bytes.Index(e, []byte{0xff, 0x25})
		if j < 0 || j+6 > len(e) {
			continue
		}
		at := sec.Addr + uint64(off+j+6)
		st := &stub{addr: sec.Addr + uint64(off)}
		slots[at+uint64(int64(int32(bo.Uint32(e[j+2:]))))] = st
		stubs = append(stubs, st)
	}
	if len(stubs) == 0 {
		return nil
	}
	// .rela.dyn can be large (a RELATIVE relocation per pointer); the
	// GLOB_DAT ones come after those, so it is read backwards in chunks
	// until every slot is found.
	const chunk = 24 * 2048
	buf := make([]byte, chunk)
	left := len(slots)
	for end := rela.Size - rela.Size%24; end > 0 && left > 0; {
		start := uint64(0)
		if end > chunk {
			start = end - chunk
		}
		b := buf[:end-start]
		if _, err := rela.ReadAt(b, int64(start)); err != nil {
			break
		}
		for i := len(b) - 24; i >= 0; i -= 24 {
			info := bo.Uint64(b[i+8:])
			if uint32(info) != uint32(elf.R_X86_64_GLOB_DAT) {
				continue
			}
			if st := slots[bo.Uint64(b[i:])]; st != nil && st.sym == 0 {
				st.sym = info >> 32
				left--
			}
		}
		end = start
	}
	var out []Sym
	for _, st := range stubs {
		if st.sym == 0 || st.sym >= uint64(len(symData)/24) {
			continue
		}
		nameOff := uint64(bo.Uint32(symData[st.sym*24:]))
		if nameOff >= uint64(len(strb)) {
			continue
		}
		name := strb[nameOff:]
		if n := bytes.IndexByte(name, 0); n > 0 {
			out = append(out, Sym{Addr: st.addr, Size: uint64(ent), Name: string(name[:n]) + "@plt"})
		}
	}
	return out
}

// sectionData returns a section's bytes: a slice of the module's mapping
// when the file is mapped (no copy), else one read (debug/elf's Data reads
// in chunks, to survive a section size larger than the file; sections over
// 16 MB, and compressed ones, still go that way). The bytes are never
// written to: names are taken as strings over them without a copy.
func sectionData(sec *elf.Section) ([]byte, error) {
	if sec.Type == elf.SHT_NOBITS {
		return nil, errors.New("section has no data")
	}
	if sec.Flags&elf.SHF_COMPRESSED == 0 {
		if sr, ok := sec.ReaderAt.(*io.SectionReader); ok {
			if mf, ok := outer(sr).(*mappedFile); ok {
				if b, ok := mf.slice(sec.Offset, sec.Size); ok {
					return b, nil
				}
				return nil, errors.New("section runs past the end of the file")
			}
		}
	}
	if sec.Flags&elf.SHF_COMPRESSED != 0 || sec.Size > 16<<20 {
		return sec.Data()
	}
	b := make([]byte, sec.Size)
	if _, err := sec.ReadAt(b, 0); err != nil {
		return nil, err
	}
	return b, nil
}

func outer(sr *io.SectionReader) io.ReaderAt {
	r, _, _ := sr.Outer()
	return r
}

// covered says whether a range of t (sorted) contains addr.
func (t symtab) covered(addr uint64) bool {
	i, _ := slices.BinarySearchFunc(t, addr, func(s Sym, a uint64) int {
		if s.Addr > a {
			return 1
		}
		return -1
	})
	i--
	return i >= 0 && addr < t[i].Addr+t[i].Size
}

// addUncovered adds the entries of more whose start no range of t covers,
// keeping t sorted: one merge pass over both (more is sorted first).
func (t symtab) addUncovered(more []Sym) symtab {
	if len(more) == 0 {
		return t
	}
	more = sortRuns(more, symAddr)
	out := make(symtab, 0, len(t)+len(more))
	i := 0
	var coverEnd uint64 // end of the furthest-reaching range of t started so far
	for _, s := range more {
		for i < len(t) && t[i].Addr <= s.Addr {
			coverEnd = max(coverEnd, t[i].Addr+t[i].Size)
			out = append(out, t[i])
			i++
		}
		if s.Size == 0 || s.Addr < coverEnd {
			continue
		}
		out = append(out, s)
	}
	return append(out, t[i:]...)
}

// sortRuns sorts s by address (addr) by merging its ascending runs:
// .eh_frame lists FDEs in link order, a few runs (hot, cold, startup
// text), where a general sort costs several times more.
func sortRuns[E any](s []E, addr func(E) uint64) []E {
	var bounds []int
	for i := 1; i < len(s); i++ {
		if addr(s[i]) < addr(s[i-1]) {
			bounds = append(bounds, i)
		}
	}
	if len(bounds) == 0 {
		return s
	}
	if len(bounds) > 64 {
		slices.SortFunc(s, func(a, b E) int { return cmp.Compare(addr(a), addr(b)) })
		return s
	}
	bounds = append([]int{0}, append(bounds, len(s))...)
	src, dst := s, make([]E, len(s))
	for len(bounds) > 2 {
		next := []int{0}
		for k := 0; k+1 < len(bounds); k += 2 {
			lo, mid := bounds[k], bounds[k+1]
			hi := mid
			if k+2 < len(bounds) {
				hi = bounds[k+2]
			}
			i, j, o := lo, mid, lo
			for i < mid && j < hi {
				if addr(src[j]) < addr(src[i]) {
					dst[o] = src[j]
					j++
				} else {
					dst[o] = src[i]
					i++
				}
				o++
			}
			o += copy(dst[o:], src[i:mid])
			copy(dst[o:], src[j:hi])
			next = append(next, hi)
		}
		bounds = next
		src, dst = dst, src
	}
	return src
}

func symAddr(s Sym) uint64       { return s.Addr }
func fdeStart(f fdeRange) uint64 { return f.start }

// table is a module's names: sized symbols, PLT stubs and labels in syms;
// the .eh_frame function ranges that no symbol covers in fdes, kept apart
// in a compact form (a large stripped library has a hundred thousand, and
// merging them into syms cost more than the rest of its load), named by
// fdeNames when a zero-size symbol starts there. An address belongs to the
// nearest start at or below it of either list, if that range holds it:
// what one merged table would give.
type table struct {
	syms     symtab
	fdes     []fdeRange
	fdeNames map[uint64]string
	c        *ctab // set: the symbols are a cache file's (tablecache.go), not syms
}

// fdeRange is one FDE's code range.
type fdeRange struct {
	start, size uint64
}

// predFDE is the index of the last range of f starting at or below addr
// (-1: none).
func predFDE(f []fdeRange, addr uint64) int {
	i, _ := slices.BinarySearchFunc(f, addr, func(r fdeRange, a uint64) int {
		if r.start > a {
			return 1
		}
		return -1
	})
	return i - 1
}

// predSym is the index of the last symbol of t starting at or below addr
// (-1: none).
func (t symtab) pred(addr uint64) int {
	return sort.Search(len(t), func(i int) bool { return t[i].Addr > addr }) - 1
}

// owner is the entry addr falls under, before checking it holds addr:
// the nearest start at or below addr of syms and fdes.
func (tb *table) owner(addr uint64) (Sym, bool) {
	var s Sym
	have := false
	if tb.c != nil {
		if i := tb.c.pred(addr); i >= 0 {
			s, have = tb.c.at(i), true
		}
	} else if i := tb.syms.pred(addr); i >= 0 {
		s, have = tb.syms[i], true
	}
	if j := predFDE(tb.fdes, addr); j >= 0 && (!have || tb.fdes[j].start > s.Addr) {
		f := tb.fdes[j]
		return Sym{Addr: f.start, Size: f.size, Name: tb.fdeNames[f.start]}, true
	}
	return s, have
}

// find is the symbol that owns addr.
func (tb *table) find(addr uint64) (Sym, bool) {
	s, ok := tb.owner(addr)
	if !ok || (s.Size > 0 && addr >= s.Addr+s.Size) {
		return Sym{}, false // nothing, or a gap after a sized range
	}
	return s, true
}

// sizedSymbols orders each address's aliases by preference (sized first,
// FUNC first, then rank and name) and returns the sized symbols by
// address (room for extra more), the names of addresses whose best symbol
// has no size, and the NOTYPE labels among those (the first stage of
// buildTable).
func sizedSymbols(raw []rawSym, extra int) (t symtab, zeroName map[uint64]string, labels []rawSym) {
	// Sort small keys by address (moving whole rawSyms costs more than
	// the rest of the load); the few symbols at one address are then
	// ordered by preference.
	type key struct {
		addr uint64
		i    int32
	}
	keys := make([]key, len(raw))
	for i := range raw {
		keys[i] = key{raw[i].addr, int32(i)}
	}
	slices.SortFunc(keys, func(a, b key) int { return cmp.Compare(a.addr, b.addr) })
	better := func(a, b *rawSym) bool {
		if (a.size == 0) != (b.size == 0) { // sized first
			return a.size != 0
		}
		if a.notype != b.notype { // FUNC first
			return !a.notype
		}
		if a.rank != b.rank {
			return a.rank < b.rank
		}
		return a.name < b.name
	}
	// The symbols are read through keys, not copied in address order: a
	// copy of a large module's symbols is megabytes of fresh memory, each
	// page a fault.
	for i := 0; i < len(keys); {
		j := i + 1
		for j < len(keys) && keys[j].addr == keys[i].addr {
			j++
		}
		for k := i + 1; k < j; k++ { // insertion sort of one address's aliases
			for l := k; l > i && better(&raw[keys[l].i], &raw[keys[l-1].i]); l-- {
				keys[l], keys[l-1] = keys[l-1], keys[l]
			}
		}
		i = j
	}
	t = make(symtab, 0, len(raw)+extra)
	for i := 0; i < len(keys); {
		j := i + 1
		for j < len(keys) && keys[j].addr == keys[i].addr {
			j++
		}
		best := &raw[keys[i].i]
		if best.size > 0 {
			t = append(t, Sym{Addr: best.addr, Size: best.size, Name: best.name})
		} else {
			if zeroName == nil {
				zeroName = map[uint64]string{}
			}
			zeroName[best.addr] = best.name
			for _, k := range keys[i:j] {
				if s := &raw[k.i]; s.notype {
					labels = append(labels, rawSym{addr: s.addr, secEnd: s.secEnd, name: best.name})
					break
				}
			}
		}
		i = j
	}
	return t, zeroName, labels
}

// buildTable applies the ownership rules above; every entry of the result
// has a size.
func buildTable(raw []rawSym, plt []Sym, fdes []fdeRange) table {
	t, zeroName, labels := sizedSymbols(raw, len(plt))
	t = t.addUncovered(plt)
	tb := table{syms: t}
	if len(fdes) > 0 {
		// The ranges whose start no symbol or stub covers (one merge pass,
		// as addUncovered), kept in place.
		fdes = sortRuns(fdes, fdeStart)
		kept := fdes[:0]
		i := 0
		var coverEnd uint64
		for _, f := range fdes {
			for i < len(t) && t[i].Addr <= f.start {
				coverEnd = max(coverEnd, t[i].Addr+t[i].Size)
				i++
			}
			if f.size == 0 || f.start < coverEnd {
				continue
			}
			kept = append(kept, f)
		}
		tb.fdes = slices.Clip(kept)
		if len(zeroName) > 0 {
			tb.fdeNames = map[uint64]string{}
			for _, f := range tb.fdes {
				if n, ok := zeroName[f.start]; ok {
					tb.fdeNames[f.start] = n
				}
			}
		}
	}
	if len(labels) > 0 {
		more := make([]Sym, 0, len(labels))
		for _, l := range labels {
			if s, ok := tb.owner(l.addr); ok && l.addr < s.Addr+s.Size {
				continue // covered
			}
			end := l.secEnd
			// The next start at or above the label, of either list.
			if i, _ := slices.BinarySearchFunc(t, l.addr, func(s Sym, a uint64) int { return cmp.Compare(s.Addr, a) }); i < len(t) && t[i].Addr < end {
				end = t[i].Addr
			}
			if j := predFDE(tb.fdes, l.addr-1) + 1; l.addr > 0 && j < len(tb.fdes) && tb.fdes[j].start < end {
				end = tb.fdes[j].start
			} else if l.addr == 0 && len(tb.fdes) > 0 && tb.fdes[0].start < end {
				end = tb.fdes[0].start
			}
			if end > l.addr {
				more = append(more, Sym{Addr: l.addr, Size: end - l.addr, Name: l.name})
			}
		}
		// A label under a range of fdes that started earlier is covered
		// too (addUncovered's rule, over both lists).
		kept := more[:0]
		j := 0
		var coverEnd uint64
		for _, l := range more {
			for j < len(tb.fdes) && tb.fdes[j].start <= l.Addr {
				coverEnd = max(coverEnd, tb.fdes[j].start+tb.fdes[j].size)
				j++
			}
			if l.Addr < coverEnd {
				continue
			}
			kept = append(kept, l)
		}
		tb.syms = t.addUncovered(kept)
	}
	return tb
}
