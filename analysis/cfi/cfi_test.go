package cfi

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"perfinsp/internal/testenv"
)

// The tests keep HOME and the caches in a temporary directory of their own.
func TestMain(m *testing.M) { testenv.Main(m) }

// sec builds a section of entries: each a body (after the length) that
// ent fills in, given the offset of its length field.
type sec struct {
	b     []byte
	order binary.AppendByteOrder
	dw64  bool // 64-bit DWARF lengths and ids
}

func (s *sec) u32(v uint32) []byte { return s.order.AppendUint32(nil, v) }

// entry appends an entry whose body body(off) returns, off being the
// offset of its id field.
func (s *sec) entry(body func(idOff int) []byte) int {
	off := len(s.b)
	idOff := off + 4
	if s.dw64 {
		idOff = off + 12
	}
	b := body(idOff)
	if s.dw64 {
		s.b = s.order.AppendUint32(s.b, 0xffffffff)
		s.b = s.order.AppendUint64(s.b, uint64(len(b)))
	} else {
		s.b = s.order.AppendUint32(s.b, uint32(len(b)))
	}
	s.b = append(s.b, b...)
	return off
}

// id is a CIE id or pointer of the section's width.
func (s *sec) id(v uint64) []byte {
	if s.dw64 {
		return s.order.AppendUint64(nil, v)
	}
	return s.order.AppendUint32(nil, uint32(v))
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// x86CIE: CFA = rsp+8, RA at CFA-8.
var x86CIE = []byte{0x0c, 7, 8, 0x90, 1}

func check(t *testing.T, what string, got, want any) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%s: %v, want %v", what, got, want)
	}
}

// TestEHFrame: CIEs with personality, LSDA, signal frames and absolute
// or pc-relative addresses, FDEs with augmentation data, a terminator
// between entries, FDEs out of order.
func TestEHFrame(t *testing.T) {
	const addr = 0x1000
	s := &sec{order: binary.LittleEndian}
	// "zPLR": personality (indirect pc-relative sdata4), LSDA and FDE
	// addresses pc-relative sdata4; version 1 (return column a byte).
	zplr := s.entry(func(int) []byte {
		return cat(s.id(0), []byte{1}, []byte("zPLR\x00"), []byte{1, 0x78, 16, 7, 0x9b}, s.u32(0x1234), []byte{0x1b, 0x1b}, x86CIE)
	})
	// "zRS" with absolute udata8 addresses, version 3 (return column a ULEB128).
	zrs := s.entry(func(int) []byte {
		return cat(s.id(0), []byte{3}, []byte("zRS\x00"), []byte{4, 0x7c, 16, 1, 0x04}, x86CIE[:3])
	})
	s.entry(func(idOff int) []byte { // of zplr: [0x5000, 0x5040), LSDA, 2 instructions
		at := addr + idOff + 4 // the address of pc_begin
		return cat(s.id(uint64(idOff-zplr)), s.u32(uint32(0x5000-at)), s.u32(0x40), []byte{4}, s.u32(0xdead), []byte{0x41, 0x0e, 16})
	})
	// A terminator: entries after it are still read.
	s.b = append(s.b, 0, 0, 0, 0)
	s.entry(func(idOff int) []byte { // of zrs: [0x3000, 0x3010)
		return cat(s.id(uint64(idOff-zrs)), binary.LittleEndian.AppendUint64(nil, 0x3000), binary.LittleEndian.AppendUint64(nil, 0x10), []byte{0}, []byte{0x42})
	})
	s.entry(func(idOff int) []byte { // of zplr: [0x5000, 0x5000) (empty, after fde1 at the same address)
		at := addr + idOff + 4
		return cat(s.id(uint64(idOff-zplr)), s.u32(uint32(0x5000-at)), s.u32(0), []byte{0})
	})
	fdes, err := Parse(Section{Data: s.b, Addr: addr, EH: true, PtrSize: 8, Order: binary.LittleEndian})
	if err != nil {
		t.Fatal(err)
	}
	if len(fdes) != 3 {
		t.Fatalf("%d FDEs, want 3", len(fdes))
	}
	check(t, "ranges", [][2]uint64{{fdes[0].Begin, fdes[0].End()}, {fdes[1].Begin, fdes[1].End()}, {fdes[2].Begin, fdes[2].End()}},
		[][2]uint64{{0x3000, 0x3010}, {0x5000, 0x5040}, {0x5000, 0x5000}})
	check(t, "instructions", [][]byte{fdes[0].Ins, fdes[1].Ins, fdes[2].Ins}, [][]byte{{0x42}, {0x41, 0x0e, 16}, {}})
	a, z := fdes[1].CIE, fdes[0].CIE
	check(t, "zPLR CIE", []any{a.Offset, a.Version, a.Augmentation, a.CodeAlign, a.DataAlign, a.RA, a.Initial, a.Signal},
		[]any{zplr, 1, "zPLR", 1, -8, 16, x86CIE, false})
	check(t, "zRS CIE", []any{z.Offset, z.Version, z.Augmentation, z.CodeAlign, z.DataAlign, z.RA, z.Initial, z.Signal},
		[]any{zrs, 3, "zRS", 4, -4, 16, x86CIE[:3], true})
	if fdes[2].CIE != a {
		t.Error("two FDEs of one CIE have two CIEs")
	}
}

// TestDebugFrame: .debug_frame's absolute addresses and CIE offsets,
// CIE versions 1, 3 and 4 (address and segment selector sizes), 64-bit
// DWARF.
func TestDebugFrame(t *testing.T) {
	for _, dw64 := range []bool{false, true} {
		s := &sec{order: binary.LittleEndian, dw64: dw64}
		all := uint64(0xffffffff)
		if dw64 {
			all = 1<<64 - 1
		}
		v1 := s.entry(func(int) []byte { return cat(s.id(all), []byte{1, 0, 1, 0x78, 16}, x86CIE) })
		v4 := s.entry(func(int) []byte { return cat(s.id(all), []byte{4, 0, 4, 0, 1, 0x7c, 0x80, 0x01}, x86CIE[:3]) })
		s.entry(func(int) []byte {
			return cat(s.id(uint64(v4)), s.u32(0x2000), s.u32(0x20), []byte{0x41})
		})
		s.entry(func(int) []byte {
			return cat(s.id(uint64(v1)), binary.LittleEndian.AppendUint64(nil, 0x1000), binary.LittleEndian.AppendUint64(nil, 0x30), []byte{0x42, 0x43})
		})
		fdes, err := Parse(Section{Data: s.b, PtrSize: 8, Order: binary.LittleEndian})
		if err != nil {
			t.Fatalf("64-bit %v: %v", dw64, err)
		}
		if len(fdes) != 2 {
			t.Fatalf("64-bit %v: %d FDEs, want 2", dw64, len(fdes))
		}
		f, g := fdes[0], fdes[1]
		check(t, "v1 FDE", []any{f.Begin, f.Size, f.Ins, f.CIE.Offset, f.CIE.Version, f.CIE.RA, f.CIE.DataAlign, f.CIE.Initial},
			[]any{0x1000, 0x30, []byte{0x42, 0x43}, v1, 1, 16, -8, x86CIE})
		check(t, "v4 FDE", []any{g.Begin, g.Size, g.Ins, g.CIE.Offset, g.CIE.Version, g.CIE.RA, g.CIE.DataAlign, g.CIE.Initial},
			[]any{0x2000, 0x20, []byte{0x41}, v4, 4, 128, -4, x86CIE[:3]})
	}
}

// TestBigEndian32: a 32-bit big-endian file's .eh_frame, absolute
// pointer-sized addresses ("zR" with encoding 0).
func TestBigEndian32(t *testing.T) {
	s := &sec{order: binary.BigEndian}
	c := s.entry(func(int) []byte { return cat(s.id(0), []byte{1}, []byte("zR\x00"), []byte{4, 0x7c, 65, 1, 0x00}) })
	s.entry(func(idOff int) []byte {
		return cat(s.id(uint64(idOff-c)), s.u32(0x10000400), s.u32(0x80), []byte{0})
	})
	fdes, err := Parse(Section{Data: s.b, Addr: 0x10000000, EH: true, PtrSize: 4, Order: binary.BigEndian})
	if err != nil || len(fdes) != 1 {
		t.Fatalf("%d FDEs, %v", len(fdes), err)
	}
	check(t, "FDE", []any{fdes[0].Begin, fdes[0].Size, fdes[0].CIE.RA}, []any{0x10000400, 0x80, 65})
}

// TestUnknownAugmentation: a letter after 'R' that the reader does not
// know ends the reading of the augmentation data; the data's length
// still places the initial instructions, and the FDEs are read.
func TestUnknownAugmentation(t *testing.T) {
	s := &sec{order: binary.LittleEndian}
	c := s.entry(func(int) []byte {
		return cat(s.id(0), []byte{1}, []byte("zRX\x00"), []byte{1, 0x78, 16, 3, 0x03, 0xee, 0xee}, x86CIE)
	})
	s.entry(func(idOff int) []byte {
		return cat(s.id(uint64(idOff-c)), s.u32(0x700), s.u32(0x10), []byte{0}, []byte{0x41})
	})
	fdes, err := Parse(Section{Data: s.b, Addr: 0x100, EH: true})
	if err != nil || len(fdes) != 1 {
		t.Fatalf("%d FDEs, %v", len(fdes), err)
	}
	check(t, "FDE", []any{fdes[0].Begin, fdes[0].Size, fdes[0].Ins, fdes[0].CIE.Initial}, []any{0x700, 0x10, []byte{0x41}, x86CIE})
}

// malformed is a section of one good CIE (its FDE addresses in encoding
// enc, of 4 bytes) and FDE, then the entry bad makes (given the offsets of
// the good CIE and FDE and of its own id field) at badOff, then another
// good FDE.
func malformed(enc byte, bad func(s *sec, cie, fde, idOff int) []byte) (data []byte, badOff int) {
	s := &sec{order: binary.LittleEndian}
	c := s.entry(func(int) []byte {
		return cat(s.id(0), []byte{1}, []byte("zR\x00"), []byte{1, 0x78, 16, 1, enc}, x86CIE)
	})
	good := func(idOff int) []byte { return cat(s.id(uint64(idOff-c)), s.u32(0x100), s.u32(0x10), []byte{0}) }
	f := s.entry(good)
	badOff = s.entry(func(idOff int) []byte { return bad(s, c, f, idOff) })
	s.entry(good)
	return s.b, badOff
}

// TestMalformed: each malformed entry is reported; the FDEs around it
// that are well formed are read (all but where the framing breaks). The
// FDEs' addresses are pc-relative sdata4 (GCC's and LLVM's) or absolute
// udata4.
func TestMalformed(t *testing.T) {
	for _, enc := range []byte{0x1b, 0x03} {
		testMalformed(t, enc)
	}
}

func testMalformed(t *testing.T, enc byte) {
	for _, c := range []struct {
		name, err string
		fdes      int
		bad       func(s *sec, cie, fde, idOff int) []byte
	}{
		{"augmentation data past the FDE's end", "augmentation data past its end", 2, func(s *sec, cie, fde, idOff int) []byte {
			return cat(s.id(uint64(idOff-cie)), s.u32(0x200), s.u32(0x10), []byte{0x80, 0x80, 0x80, 0x80, 0x04})
		}},
		{"one-byte augmentation data length past the end", "augmentation data past its end", 2, func(s *sec, cie, fde, idOff int) []byte {
			return cat(s.id(uint64(idOff-cie)), s.u32(0x200), s.u32(0x10), []byte{9})
		}},
		{"truncated address", "truncated", 2, func(s *sec, cie, fde, idOff int) []byte {
			return cat(s.id(uint64(idOff-cie)), []byte{1, 2})
		}},
		{"CIE pointer before the section", "before the section", 2, func(s *sec, cie, fde, idOff int) []byte {
			return cat(s.id(uint64(idOff+1)), s.u32(0x200), s.u32(0x10), []byte{0})
		}},
		{"CIE pointer to an FDE", "not a CIE", 2, func(s *sec, cie, fde, idOff int) []byte {
			return cat(s.id(uint64(idOff-fde)), s.u32(0x200), s.u32(0x10), []byte{0})
		}},
		{"CIE pointer into the middle of an entry", "CIE", 2, func(s *sec, cie, fde, idOff int) []byte {
			return cat(s.id(uint64(idOff-cie-3)), s.u32(0x200), s.u32(0x10), []byte{0})
		}},
		{"length past the section", "past the end of the section", 1, func(s *sec, cie, fde, idOff int) []byte {
			return cat(s.id(uint64(idOff-cie)), s.u32(0x200), s.u32(0x10), []byte{0})
		}},
	} {
		t.Run(fmt.Sprintf("%s, encoding %#x", c.name, enc), func(t *testing.T) {
			data, badOff := malformed(enc, c.bad)
			if c.name == "length past the section" {
				binary.LittleEndian.PutUint32(data[badOff:], 1<<20)
			}
			fdes, err := Parse(Section{Data: data, Addr: 0x100, EH: true})
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("error %v, want one saying %q", err, c.err)
			}
			if len(fdes) != c.fdes {
				t.Errorf("%d FDEs, want %d", len(fdes), c.fdes)
			}
		})
	}
}

// TestBadCIEs: CIEs the reader refuses, each reported, their FDEs skipped.
func TestBadCIEs(t *testing.T) {
	for _, c := range []struct {
		name, err string
		cie       []byte // after the id
	}{
		{"version 2", "version 2", []byte{2, 0, 1, 0x78, 16}},
		{"augmentation not starting with z", "augmentation", []byte{1, 'x', 0, 1, 0x78, 16}},
		{"unterminated augmentation", "augmentation string", []byte{1, 'z', 'R'}},
		{"augmentation longer than 32 bytes", "augmentation string", append(append([]byte{1, 'z'}, bytes.Repeat([]byte{'S'}, 40)...), 0, 1, 0x78, 16, 0)},
		{"datarel FDE addresses", "FDE address encoding", []byte{1, 'z', 'R', 0, 1, 0x78, 16, 1, 0x3b}},
		{"indirect FDE addresses", "FDE address encoding", []byte{1, 'z', 'R', 0, 1, 0x78, 16, 1, 0x9b}},
		{"undefined size format", "FDE address encoding", []byte{1, 'z', 'R', 0, 1, 0x78, 16, 1, 0x07}},
		{"augmentation data past the CIE", "augmentation data past its end", []byte{1, 'z', 'R', 0, 1, 0x78, 16, 9, 0x1b}},
		{"truncated personality", "personality", []byte{1, 'z', 'P', 0, 1, 0x78, 16, 2, 0x00, 1}},
		{"LEB128 longer than 32 bytes", "code alignment", append(append([]byte{1, 0}, bytes.Repeat([]byte{0x80}, 40)...), 0)},
		{"version 4, segment selectors", "segment selector", []byte{4, 0, 8, 4, 1, 0x78, 16}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := &sec{order: binary.LittleEndian}
			cie := s.entry(func(int) []byte { return cat(s.id(0), c.cie) })
			s.entry(func(idOff int) []byte { return cat(s.id(uint64(idOff-cie)), s.u32(0x100), s.u32(0x10), []byte{0}) })
			s.entry(func(idOff int) []byte { return cat(s.id(uint64(idOff-cie)), s.u32(0x200), s.u32(0x10), []byte{0}) })
			fdes, err := Parse(Section{Data: s.b, Addr: 0x100, EH: true})
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("error %v, want one saying %q", err, c.err)
			}
			if len(fdes) != 0 {
				t.Errorf("%d FDEs of a bad CIE, want 0", len(fdes))
			}
		})
	}
}

// TestLimits: a program longer than MaxProgram is skipped (no error);
// beyond MaxFDEs FDEs the reader stops with an error.
func TestLimits(t *testing.T) {
	s := &sec{order: binary.LittleEndian}
	cie := s.entry(func(int) []byte { return cat(s.id(0), []byte{1, 0, 1, 0x78, 16}) })
	s.entry(func(idOff int) []byte {
		return cat(s.id(uint64(idOff-cie)), s.u32(0x100), s.u32(0x10), make([]byte, MaxProgram+1))
	})
	s.entry(func(idOff int) []byte {
		return cat(s.id(uint64(idOff-cie)), s.u32(0x200), s.u32(0x10), make([]byte, MaxProgram))
	})
	fdes, err := Parse(Section{Data: s.b, EH: true, PtrSize: 4})
	if err != nil || len(fdes) != 1 || fdes[0].Begin != 0x200 {
		t.Errorf("%d FDEs (%v), want the one at 0x200", len(fdes), err)
	}

	s = &sec{order: binary.LittleEndian}
	cie = s.entry(func(int) []byte { return cat(s.id(0), []byte{1, 0, 1, 0x78, 16}) })
	for i := 0; i <= MaxFDEs; i++ {
		s.entry(func(idOff int) []byte { return cat(s.id(uint64(idOff-cie)), s.u32(uint32(i)), s.u32(1)) })
	}
	r := NewReader(Section{Data: s.b, EH: true, PtrSize: 4})
	n := 0
	for _, ok := r.Next(); ok; _, ok = r.Next() {
		n++
	}
	if n != MaxFDEs || r.Err() == nil || !strings.Contains(r.Err().Error(), "more than") {
		t.Errorf("%d FDEs (%v), want %d and an error", n, r.Err(), MaxFDEs)
	}
}

// checkInvariants: what every result of Parse holds, whatever the input.
func checkInvariants(t *testing.T, s Section, fdes []FDE, err error) {
	t.Helper()
	if !slices.IsSortedFunc(fdes, byBegin) {
		t.Fatal("FDEs not sorted")
	}
	r := NewReader(s)
	if n := r.Count(); len(fdes) > n {
		t.Fatalf("%d FDEs, Count %d", len(fdes), n)
	}
	for i := range fdes {
		f := &fdes[i]
		if f.CIE == nil || len(f.CIE.Initial)+len(f.Ins) > MaxProgram || f.End() < f.Begin {
			t.Fatalf("FDE %d: %+v", i, f)
		}
		if len(f.Ins) > 0 && !within(s.Data, f.Ins) || len(f.CIE.Initial) > 0 && !within(s.Data, f.CIE.Initial) {
			t.Fatalf("FDE %d: instructions outside the section", i)
		}
	}
}

// within says whether b is a slice of d.
func within(d, b []byte) bool {
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(d)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return p >= lo && p+uintptr(len(b)) <= lo+uintptr(len(d))
}

// FuzzCFI reads arbitrary sections as .eh_frame and .debug_frame, 32-
// and 64-bit, both byte orders: no panic, and the results hold the
// invariants.
func FuzzCFI(f *testing.F) {
	bad, _ := malformed(0x1b, func(s *sec, cie, fde, idOff int) []byte {
		return cat(s.id(uint64(idOff-cie)), s.u32(0x200), s.u32(0x10), []byte{1, 0xff, 0x41})
	})
	for _, seed := range [][]byte{
		bad,
		func() []byte {
			s := &sec{order: binary.LittleEndian}
			c := s.entry(func(int) []byte {
				return cat(s.id(0), []byte{1}, []byte("zPLR\x00"), []byte{1, 0x78, 16, 7, 0x9b}, s.u32(0x1234), []byte{0x1b, 0x1b}, x86CIE)
			})
			s.entry(func(idOff int) []byte {
				return cat(s.id(uint64(idOff-c)), s.u32(0x100), s.u32(0x40), []byte{4}, s.u32(0xdead), []byte{0x41, 0x0e, 16})
			})
			return s.b
		}(),
	} {
		f.Add(seed, true, uint64(0x1000), uint8(0))
	}
	s := &sec{order: binary.LittleEndian, dw64: true}
	c := s.entry(func(int) []byte { return cat(s.id(1<<64-1), []byte{4, 0, 8, 0, 1, 0x78, 16}, x86CIE) })
	s.entry(func(int) []byte {
		return cat(s.id(uint64(c)), binary.LittleEndian.AppendUint64(nil, 0x1000), binary.LittleEndian.AppendUint64(nil, 0x30), []byte{0x42})
	})
	f.Add(s.b, false, uint64(0), uint8(0))
	f.Fuzz(func(t *testing.T, data []byte, eh bool, addr uint64, mode uint8) {
		s := Section{Data: data, Addr: addr, EH: eh, PtrSize: 8, Order: binary.LittleEndian}
		if mode&1 != 0 {
			s.PtrSize = 4
		}
		if mode&2 != 0 {
			s.Order = binary.BigEndian
		}
		fdes, err := Parse(s)
		checkInvariants(t, s, fdes, err)
	})
}
