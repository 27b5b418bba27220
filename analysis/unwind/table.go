package unwind

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"perfinsp/analysis/cfi"
)

// Bounds on what one ELF file may cost (the files are the profiled
// processes', hence hostile).
const (
	maxSection = cfi.MaxSection // bytes of .eh_frame / .debug_frame
	maxLoads   = 32             // PT_LOAD headers per file
	// maxCache is the bytes of rows a Table keeps (about 110k rows);
	// beyond it an FDE's program is run for each lookup instead (no
	// allocation, bounded by cfi.MaxProgram).
	maxCache = 16 << 20
)

// load is one PT_LOAD header: file offsets [off, end) are at vaddr.
type load struct{ off, end, vaddr uint64 }

// cie is what the unwinder needs of a Common Information Entry.
type cie struct {
	init   []byte // initial instructions
	caf    uint64 // code alignment factor
	daf    int64  // data alignment factor
	signal bool   // 'S' augmentation: FDEs of signal trampolines
}

// fde is one Frame Description Entry: the code [lo, hi) (link-time
// virtual addresses) and its CFA program; rows is its table, built by the
// first lookup.
type fde struct {
	lo, hi uint64
	ins    []byte
	cie    *cie
	rows   atomic.Pointer[rowSet]
}

// Table is one ELF file's call-frame information. Safe for concurrent use
// by several goroutines: an FDE's rows are built by the first lookup of one
// of its addresses and published atomically; lookups after that take no
// lock and allocate nothing.
type Table struct {
	loads  []load
	fdes   []fde // sorted by lo
	cached atomic.Int64
}

// Load reads the CFI of the ELF file r (size bytes): its .eh_frame, or its
// .debug_frame when it has no .eh_frame, and the PT_LOAD headers that turn
// file offsets into virtual addresses. A file with neither section (a Go
// binary) gives a Table without FDEs: Unwind then takes frame-pointer steps
// in it. Sections larger than 64 MiB, more than 1M FDEs or 32 PT_LOAD
// headers are refused; a malformed file gives an error, never a panic.
func Load(r io.ReaderAt, size int64) (*Table, error) {
	loads, data, addr, eh, err := readELF(r, size)
	if err != nil {
		return nil, err
	}
	return newTable(loads, data, addr, eh)
}

// readELF reads the PT_LOAD headers and the CFI section of the ELF file r.
// The standard library's ELF parser has panicked on crafted headers
// (golang/go#70584, found by fuzzing in Go 1.23): a panic there is an
// error here, not the agent's death. The CFI section is read outside this
// guard, by a reader that cannot panic.
func readELF(r io.ReaderAt, size int64) (loads []load, data []byte, addr uint64, eh bool, err error) {
	defer func() {
		if p := recover(); p != nil {
			loads, data, err = nil, nil, fmt.Errorf("unwind: malformed ELF file (debug/elf panic: %v)", p)
		}
	}()
	if size < 0 {
		return nil, nil, 0, false, fmt.Errorf("unwind: negative file size %d", size)
	}
	f, err := elf.NewFile(io.NewSectionReader(r, 0, size))
	if err != nil {
		return nil, nil, 0, false, fmt.Errorf("unwind: reading ELF headers: %w", err)
	}
	if f.Class != elf.ELFCLASS64 || f.Machine != elf.EM_X86_64 {
		return nil, nil, 0, false, fmt.Errorf("unwind: not an x86-64 ELF file (%v, %v)", f.Class, f.Machine)
	}
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD || p.Filesz == 0 {
			continue
		}
		if len(loads) == maxLoads {
			return nil, nil, 0, false, fmt.Errorf("unwind: more than %d PT_LOAD headers", maxLoads)
		}
		if p.Off+p.Filesz < p.Off || p.Vaddr+p.Filesz < p.Vaddr {
			return nil, nil, 0, false, fmt.Errorf("unwind: PT_LOAD at file offset %#x overflows", p.Off)
		}
		loads = append(loads, load{p.Off, p.Off + p.Filesz, p.Vaddr})
	}
	data, addr, eh, err = cfiSection(f, size)
	if err != nil {
		return nil, nil, 0, false, err
	}
	return loads, data, addr, eh, nil
}

// cfiSection reads .eh_frame (eh true, addr its virtual address), else
// .debug_frame; nil data when the file has neither.
func cfiSection(f *elf.File, size int64) (data []byte, addr uint64, eh bool, err error) {
	if s := f.Section(".eh_frame"); s != nil && s.Type != elf.SHT_NOBITS && s.Size > 0 {
		if s.Size > maxSection {
			return nil, 0, false, fmt.Errorf("unwind: .eh_frame of %d bytes (limit %d)", s.Size, maxSection)
		}
		if s.Flags&elf.SHF_COMPRESSED != 0 || s.Offset > uint64(size) || s.Size > uint64(size)-s.Offset {
			return nil, 0, false, fmt.Errorf("unwind: .eh_frame at file offset %#x (%d bytes) is compressed or outside the file", s.Offset, s.Size)
		}
		if s.Addr == 0 {
			return nil, 0, false, errors.New("unwind: .eh_frame has no address (not a linked file)")
		}
		data = make([]byte, s.Size)
		if _, err := s.ReadAt(data, 0); err != nil {
			return nil, 0, false, fmt.Errorf("unwind: reading .eh_frame: %w", err)
		}
		return data, s.Addr, true, nil
	}
	if s := f.Section(".debug_frame"); s != nil && s.Type != elf.SHT_NOBITS && s.Size > 0 {
		if s.Flags&elf.SHF_COMPRESSED == 0 && (s.Offset > uint64(size) || s.Size > uint64(size)-s.Offset) {
			return nil, 0, false, fmt.Errorf("unwind: .debug_frame at file offset %#x (%d bytes) is outside the file", s.Offset, s.Size)
		}
		data, err := io.ReadAll(io.LimitReader(s.Open(), maxSection+1))
		if err != nil {
			return nil, 0, false, fmt.Errorf("unwind: reading .debug_frame: %w", err)
		}
		if len(data) > maxSection {
			return nil, 0, false, fmt.Errorf("unwind: .debug_frame larger than %d bytes", maxSection)
		}
		return data, 0, false, nil
	}
	return nil, 0, false, nil
}

// newTable reads the CIEs and FDEs of the CFI section data (.eh_frame at
// virtual address addr when eh, else .debug_frame) and keeps a sorted
// table of the FDEs the unwinder can use.
func newTable(loads []load, data []byte, addr uint64, eh bool) (*Table, error) {
	name := ".debug_frame"
	if eh {
		name = ".eh_frame"
	}
	t := &Table{loads: loads}
	if len(data) == 0 {
		return t, nil
	}
	entries, err := cfi.Parse(cfi.Section{Data: data, Addr: addr, EH: eh, PtrSize: 8, Order: binary.LittleEndian})
	if err != nil {
		return nil, fmt.Errorf("unwind: %s: %w", name, err)
	}
	n := 0
	for i := range entries {
		if usable(&entries[i]) {
			n++
		}
	}
	cies := map[*cfi.CIE]*cie{}
	t.fdes = make([]fde, n)
	i := 0
	for k := range entries {
		e := &entries[k]
		if !usable(e) {
			continue
		}
		c := cies[e.CIE]
		if c == nil {
			c = &cie{init: e.CIE.Initial, caf: e.CIE.CodeAlign, daf: e.CIE.DataAlign, signal: e.CIE.Signal}
			cies[e.CIE] = c
		}
		f := &t.fdes[i]
		f.lo, f.hi, f.ins, f.cie = e.Begin, e.Begin+e.Size, e.Ins, c
		i++
	}
	return t, nil
}

// usable says whether the unwinder can use e: a non-empty range that does
// not wrap, return addresses in column 16 (RIP), a code alignment factor,
// a CIE of today's layout (not GCC 2's "eh").
func usable(e *cfi.FDE) bool {
	c := e.CIE
	return e.End() > e.Begin && c.RA == RIP && c.CodeAlign != 0 && c.Augmentation != "eh"
}

// vaddr turns a file offset into the file's link-time virtual address.
func (t *Table) vaddr(off uint64) (uint64, bool) {
	for i := range t.loads {
		l := &t.loads[i]
		if off >= l.off && off < l.end {
			return off - l.off + l.vaddr, true
		}
	}
	return 0, false
}

// find returns the FDE covering the virtual address v, or nil.
func (t *Table) find(v uint64) *fde {
	// The last FDE with lo <= v.
	lo, hi := 0, len(t.fdes)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if t.fdes[m].lo <= v {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == 0 {
		return nil
	}
	if f := &t.fdes[lo-1]; v < f.hi {
		return f
	}
	return nil
}

// FrameFromRBP tells how the CFA is computed at the file offset off: from
// RBP (true: the function has set up its frame pointer, so a frame-pointer
// walk from here finds its return address) or otherwise (false: at the
// entry, in a prologue or epilogue, or a function that never sets one up,
// whose return address a frame-pointer walk misses). ok is false where the
// table has no row for off.
func (t *Table) FrameFromRBP(off uint64) (fromRBP, ok bool) {
	v, ok := t.vaddr(off)
	if !ok {
		return false, false
	}
	f := t.find(v)
	if f == nil {
		return false, false
	}
	var scratch row
	r, ok := t.rowAt(f, v, &scratch)
	if !ok {
		return false, false
	}
	return r.cfa.kind == kReg && r.cfa.reg == RBP, true
}
