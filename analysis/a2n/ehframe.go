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
