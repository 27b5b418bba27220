package a2n

import (
	"debug/elf"
	"debug/gosym"
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
	sec := f.Section(".gopclntab")
	text := f.Section(".text")
	if sec == nil || text == nil || sec.Type == elf.SHT_NOBITS || sec.Size > MaxGoPclntab {
		return nil
	}
	data, err := sectionData(sec)
	if err != nil {
		return nil
	}
	var tab *gosym.Table
	func() {
		// debug/gosym trusts the table's offsets: a hostile one may
		// panic, which costs the names, never the run.
		defer func() { _ = recover() }()
		tab, err = gosym.NewTable(nil, gosym.NewLineTable(data, text.Addr))
	}()
	if err != nil || tab == nil {
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
