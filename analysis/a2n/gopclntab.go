package a2n

import (
	"debug/elf"
	"debug/gosym"
	"encoding/binary"
	"io"
	"path"
)

// MaxGoPclntab caps the .gopclntab section read for names (a large Go
// binary's is tens of MB).
const MaxGoPclntab = 1 << 30

// goFuncs names the functions of a Go binary from its .gopclntab, the
// table the Go runtime itself symbolizes with (tracebacks, runtime.FuncForPC):
// the linker keeps it when -ldflags=-s -w strips .symtab and DWARF, and a
// Go binary has no .eh_frame, so without it a stripped Go binary's ticks
// would be one row per address. Each function is sized from its entry to
// its end. nil when f has no readable table.
func goFuncs(f *elf.File) []rawSym {
	tab, text := goTable(f)
	if tab == nil {
		return nil
	}
	end := text.Addr + text.Size
	out := make([]rawSym, 0, len(tab.Funcs))
	for i := range tab.Funcs {
		fn := &tab.Funcs[i]
		if fn.Entry < text.Addr || fn.End <= fn.Entry || fn.End > end || fn.Name == "" {
			continue
		}
		out = append(out, rawSym{addr: fn.Entry, size: fn.End - fn.Entry, secEnd: end, name: fn.Name,
			rank: aliasRank(fn.Name, elf.STB_GLOBAL, false)})
	}
	return out
}

// goTable parses f's .gopclntab; nil when f has none or it does not parse.
func goTable(f *elf.File) (*gosym.Table, *elf.Section) {
	sec := f.Section(".gopclntab")
	text := f.Section(".text")
	if sec == nil || text == nil || sec.Type == elf.SHT_NOBITS || sec.Size > MaxGoPclntab {
		return nil, nil
	}
	data, err := sectionData(sec)
	if err != nil || !goTableSane(data, f.ByteOrder) {
		return nil, nil
	}
	var tab *gosym.Table
	func() {
		// debug/gosym trusts the table's offsets: a hostile one may
		// panic, which costs the names, never the run.
		defer func() { _ = recover() }()
		tab, err = gosym.NewTable(nil, gosym.NewLineTable(data, goTextStart(f, sec, text, data)))
	}()
	if err != nil || tab == nil {
		return nil, nil
	}
	return tab, text
}

// goLine is the source line of va from the module's .gopclntab, for a Go
// binary without DWARF (-ldflags=-w, or -s -w): the file and line the Go
// runtime's own tracebacks and profiles give. Parsed at the first call.
func (m *Module) goLine(va uint64) (file string, line int, ok bool) {
	if !m.goLinesRead {
		m.goLinesRead = true
		if fh, size, err := openChecked(m.file, MaxModuleSize, false); err == nil {
			if f, err := elf.NewFile(io.NewSectionReader(fh, 0, size)); err == nil {
				m.goLines, _ = goTable(f)
			}
			fh.Close()
		}
	}
	if m.goLines == nil {
		return "", 0, false
	}
	defer func() {
		if recover() != nil {
			file, line, ok = "", 0, false
		}
	}()
	file, line, fn := m.goLines.PCToLine(va)
	if fn == nil || file == "" || line <= 0 {
		return "", 0, false
	}
	return path.Clean(file), line, true // ./main.go as DWARF has it: main.go
}

// minBytesPerGoFunc bounds the functions a .gopclntab may declare by its
// size: each has an 8-byte functab entry, a _func of 40 bytes or more, its
// name and its pc tables (Go's linkers write about 330 bytes a function).
const minBytesPerGoFunc = 64

// goTableSane checks the header of a .gopclntab before debug/gosym reads
// it: the pointer size, and a function count the section can hold.
// debug/gosym allocates a Func (and a Sym) for each function the header
// declares, so a crafted count would have post allocate some twenty times
// the section's size.
func goTableSane(data []byte, bo binary.ByteOrder) bool {
	if len(data) < 16 {
		return false
	}
	var n uint64
	switch data[7] { // the pointer size
	case 4:
		n = uint64(bo.Uint32(data[8:]))
	case 8:
		n = bo.Uint64(data[8:])
	default:
		return false
	}
	return n > 0 && n <= uint64(len(data))/minBytesPerGoFunc
}

// goTextStart is the address of runtime.text, which the functions of a
// Go 1.18 or later .gopclntab are offsets from. The header's own field is
// 0 in the file; the runtime's moduledata holds it (text, after pcHeader,
// five slices, ftab, findfunctab, minpc and maxpc). It is .text's start
// when Go's linker linked the binary alone, but not with cgo, where the
// external linker puts the C start-up code first (0x100 bytes in a small
// program: every Go function would be named after the one before it).
// The moduledata is found by its first two words, the table's address and
// that of its function names; .text's start when it is not found.
func goTextStart(f *elf.File, pcln, text *elf.Section, hdr []byte) uint64 {
	ptr := int(hdr[7])
	if magic := f.ByteOrder.Uint32(hdr); magic != 0xfffffff0 && magic != 0xfffffff1 || len(hdr) < 8+4*ptr {
		return text.Addr // (go1.16 and older: absolute entries)
	}
	word := func(b []byte) uint64 {
		if ptr == 4 {
			return uint64(f.ByteOrder.Uint32(b))
		}
		return f.ByteOrder.Uint64(b)
	}
	names := pcln.Addr + word(hdr[8+3*ptr:]) // funcnameOffset
	const textWord = 22
	for _, sec := range f.Sections {
		if sec.Type != elf.SHT_PROGBITS || sec.Flags&elf.SHF_ALLOC == 0 || sec.Flags&elf.SHF_EXECINSTR != 0 ||
			sec == pcln || sec.Size > 64<<20 || sec.Size < uint64(ptr*(textWord+1)) {
			continue
		}
		b, err := sectionData(sec)
		if err != nil {
			continue
		}
		for i := 0; i+ptr*(textWord+1) <= len(b); i += ptr {
			if word(b[i:]) != pcln.Addr || word(b[i+ptr:]) != names {
				continue
			}
			if t := word(b[i+textWord*ptr:]); t >= text.Addr && t < text.Addr+text.Size {
				return t
			}
		}
	}
	return text.Addr
}
