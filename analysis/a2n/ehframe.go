package a2n

import (
	"debug/elf"

	"perfinsp/analysis/cfi"
)

// Function ranges from .eh_frame. A module without .symtab (most
// distribution libraries) still carries call-frame information for
// unwinding: one FDE per function (and per cold part), with its start
// address and length. Those ranges group a stripped module's addresses by
// function where no symbol names them.

// fdeRanges returns the code ranges of the FDEs in f's .eh_frame, in
// section order: those read before a malformed entry stops the reader,
// without the FDEs it skips (an unreadable CIE or address).
func fdeRanges(f *elf.File) []fdeRange {
	sec := f.Section(".eh_frame")
	if sec == nil || sec.Type == elf.SHT_NOBITS || sec.Size > cfi.MaxSection {
		return nil
	}
	data, err := sectionData(sec)
	if err != nil {
		return nil
	}
	s := cfi.Section{Data: data, Addr: sec.Addr, EH: true, PtrSize: 8, Order: f.ByteOrder}
	if f.Class == elf.ELFCLASS32 {
		s.PtrSize = 4
	}
	r := cfi.NewReader(s)
	out := make([]fdeRange, 0, r.Count())
	for {
		e, ok := r.Next()
		if !ok {
			return out
		}
		if e.Begin != 0 && e.Size > 0 {
			out = append(out, fdeRange{e.Begin, e.Size})
		}
	}
}

// zeroSizeFDEs names after a zero-size FUNC symbol of raw the .eh_frame
// range of f that holds it, where no sized symbol does: glibc's
// __restore_rt, the signal trampoline every handler returns to, has no
// size, and its FDE starts at the nop before it, so that an unwinder's
// pc-1 for the handler's return address finds it — and so does a name
// lookup, which would otherwise leave the frame "libc.so.6+0x3c04f". A
// range a sized symbol starts in or covers keeps that symbol's name
// (addUncovered).
func zeroSizeFDEs(raw []rawSym, f *elf.File) []Sym {
	var zs []rawSym
	for _, s := range raw {
		if s.size == 0 && !s.notype {
			zs = append(zs, s)
		}
	}
	if len(zs) == 0 {
		return nil
	}
	fdes := fdeRanges(f)
	if len(fdes) == 0 {
		return nil
	}
	fdes = sortRuns(fdes, fdeStart)
	best := map[uint64]rawSym{} // by FDE start
	for _, z := range zs {
		j := predFDE(fdes, z.addr)
		if j < 0 || z.addr-fdes[j].start >= fdes[j].size {
			continue
		}
		if b, ok := best[fdes[j].start]; !ok || z.rank < b.rank || z.rank == b.rank && z.name < b.name {
			best[fdes[j].start] = z
		}
	}
	out := make([]Sym, 0, len(best))
	for j := range fdes {
		if z, ok := best[fdes[j].start]; ok {
			out = append(out, Sym{Addr: fdes[j].start, Size: fdes[j].size, Name: z.name})
			delete(best, fdes[j].start)
		}
	}
	return out
}
