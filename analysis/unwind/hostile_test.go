package unwind

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"math/rand"
	"testing"

	"github.com/go-delve/delve/pkg/dwarf/frame"
)

// fdeSpec is an FDE for ehFrame: code [lo, lo+size), its instructions.
type fdeSpec struct {
	lo, size uint64
	ins      []byte
}

// ehFrame encodes an .eh_frame at virtual address addr: one CIE
// (augmentation aug, "zR" or "zRS": pc-relative sdata4 addresses; code
// alignment 1, data alignment -8, return address column 16) with the
// initial instructions cieIns, then the FDEs, then a zero terminator.
func ehFrame(addr uint64, aug string, cieIns []byte, fdes ...fdeSpec) []byte {
	le := binary.LittleEndian
	cie := []byte{0, 0, 0, 0, 0, 0, 0, 0, 1}
	cie = append(cie, aug...)
	cie = append(cie, 0, 1, 0x78, 16, 1, 0x1b)
	cie = append(cie, cieIns...)
	for len(cie)%8 != 0 {
		cie = append(cie, 0) // DW_CFA_nop
	}
	le.PutUint32(cie, uint32(len(cie)-4))
	b := cie
	for _, f := range fdes {
		off := len(b)
		e := make([]byte, 17, 17+len(f.ins))
		le.PutUint32(e[4:], uint32(off+4))                     // back to the CIE
		le.PutUint32(e[8:], uint32(f.lo-(addr+uint64(off)+8))) // pc-relative
		le.PutUint32(e[12:], uint32(f.size))
		e = append(e, f.ins...)
		for len(e)%8 != 0 {
			e = append(e, 0)
		}
		le.PutUint32(e, uint32(len(e)-4))
		b = append(b, e...)
	}
	return append(b, 0, 0, 0, 0)
}

// ehOff is where mkELF puts the .eh_frame, at the same virtual address.
const ehOff = 0x200

// mkELF makes an x86-64 ELF file of one PT_LOAD (file offset = virtual
// address, the whole file) holding eh as its .eh_frame at ehOff.
func mkELF(eh []byte) []byte {
	le := binary.LittleEndian
	strtab := []byte("\x00.eh_frame\x00.shstrtab\x00")
	strOff := ehOff + len(eh)
	shOff := (strOff + len(strtab) + 7) &^ 7
	size := shOff + 3*64
	var b bytes.Buffer
	h := elf.Header64{
		Type: uint16(elf.ET_DYN), Machine: uint16(elf.EM_X86_64), Version: 1,
		Phoff: 64, Shoff: uint64(shOff), Ehsize: 64, Phentsize: 56, Phnum: 1,
		Shentsize: 64, Shnum: 3, Shstrndx: 2,
	}
	copy(h.Ident[:], "\x7fELF\x02\x01\x01")
	binary.Write(&b, le, h)
	binary.Write(&b, le, elf.Prog64{Type: uint32(elf.PT_LOAD), Flags: 5, Filesz: uint64(size), Memsz: uint64(size), Align: 0x1000})
	b.Write(make([]byte, ehOff-b.Len()))
	b.Write(eh)
	b.Write(strtab)
	b.Write(make([]byte, shOff-b.Len()))
	binary.Write(&b, le, elf.Section64{})
	binary.Write(&b, le, elf.Section64{Name: 1, Type: uint32(elf.SHT_PROGBITS), Flags: uint64(elf.SHF_ALLOC),
		Addr: ehOff, Off: ehOff, Size: uint64(len(eh)), Addralign: 8})
	binary.Write(&b, le, elf.Section64{Name: 11, Type: uint32(elf.SHT_STRTAB), Off: uint64(strOff), Size: uint64(len(strtab)), Addralign: 1})
	return b.Bytes()
}

// The CIE's initial instructions on x86-64: CFA = rsp+8, RA at CFA-8.
var x86CIE = []byte{0x0c, 7, 8, 0x90, 1}

// pltExpr is the PLT's DW_CFA_def_cfa_expression.
var pltExpr = []byte{0x0f, 11, 0x77, 8, 0x80, 0, 0x3f, 0x1a, 0x3b, 0x2a, 0x33, 0x24, 0x22}

// seedEH is a hand-made .eh_frame: a function that pushes rbx and rbp
// (remember/restore state around an epilogue), a PLT, a frame-pointer
// function.
func seedEH() []byte {
	return ehFrame(ehOff, "zR", x86CIE,
		fdeSpec{0x40, 0x40, []byte{
			0x41, 0x0e, 16, 0x83, 2, // advance 1; def_cfa_offset 16; offset rbx cfa-16
			0x41, 0x0e, 24, 0x86, 3, // advance 1; def_cfa_offset 24; offset rbp cfa-24
			0x44, 0x0a, 0x0e, 8, 0xc6, 0xc3, // advance 4; remember; def_cfa_offset 8; restore rbp, rbx
			0x41, 0x0b, // advance 1; restore_state
		}},
		fdeSpec{0x80, 0x20, pltExpr},
		fdeSpec{0xa0, 0x20, []byte{0x41, 0x0e, 16, 0x86, 2, 0x43, 0x0d, 6}}, // push rbp; mov rsp,rbp
	)
}

func TestSeedELF(t *testing.T) {
	img := mkELF(seedEH())
	tab, err := Load(bytes.NewReader(img), int64(len(img)))
	if err != nil {
		t.Fatal(err)
	}
	if len(tab.fdes) != 3 {
		t.Fatalf("%d FDEs, want 3", len(tab.fdes))
	}
	// In the PLT at an entry's jmp (pc&15 == 11): CFA = rsp+16.
	S := uint64(stackBase)
	pcs, _ := Unwind(fileFinder(tab, 0), regsOf(RIP, 0x80+16+11, RSP, S), stackOf(S, 7, 0x1234, 0), nil, 4)
	if len(pcs) < 2 || pcs[1] != 0x1234 {
		t.Errorf("PLT: %x, want 0x1234 second", pcs)
	}
	// After restore_state at 0x47: CFA = rsp+24 again.
	pcs, _ = Unwind(fileFinder(tab, 0), regsOf(RIP, 0x47, RSP, S), stackOf(S, 1, 2, 0x4321, 0), nil, 4)
	if len(pcs) < 2 || pcs[1] != 0x4321 {
		t.Errorf("restore_state: %x, want 0x4321 second", pcs)
	}
}

// TestDelvePanic: an FDE whose augmentation data length runs past its
// end makes delve's parser slice out of range; Load says so instead.
func TestDelvePanic(t *testing.T) {
	eh := ehFrame(ehOff, "zR", x86CIE, fdeSpec{0x40, 0x10, nil})
	// The FDE's augmentation data length (after the CIE's 24 bytes and
	// the FDE's 16): 1 GiB.
	bad := append(append(append([]byte{}, eh[:24+16]...), 0x80, 0x80, 0x80, 0x80, 0x04), eh[24+16+5:]...)
	func() {
		defer func() {
			t.Logf("delve's frame.Parse on it: panic %v", recover())
		}()
		frame.Parse(bad, binary.LittleEndian, 0, 8, ehOff)
	}()
	img := mkELF(bad)
	if _, err := Load(bytes.NewReader(img), int64(len(img))); err == nil {
		t.Error("Load accepted an FDE whose augmentation data runs past its end")
	} else {
		t.Log(err)
	}
}

// TestBadPrograms: malformed CFA programs give StopBad, not a panic.
func TestBadPrograms(t *testing.T) {
	S := uint64(stackBase)
	for _, ins := range [][]byte{
		{0x0b}, // restore_state without remember_state
		{0x0f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}, // block length 2^63-1
		{0x10, 7, 0x7f}, // expression longer than the FDE
		{0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a}, // remember_state 17 deep
		{0x1d, 1, 2, 3, 4, 5, 6, 7, 8}, // DW_CFA_MIPS_advance_loc8
		{0x0f, 2, 0x96, 0x2f},          // CFA expression with DW_OP_skip
		{0x0f, 1, 0x13},                // CFA expression: drop on an empty stack
	} {
		img := mkELF(ehFrame(ehOff, "zR", x86CIE, fdeSpec{0x40, 0x10, ins}))
		tab, err := Load(bytes.NewReader(img), int64(len(img)))
		if err != nil {
			t.Errorf("%x: %v", ins, err)
			continue
		}
		pcs, stop := Unwind(fileFinder(tab, 0), regsOf(RIP, 0x48, RSP, S), stackOf(S, 0x1234, 0), nil, 4)
		if stop != StopBad || len(pcs) != 1 {
			t.Errorf("%x: %x (%v), want 1 pc (bad)", ins, pcs, stop)
		}
	}
}

// checkUnwind unwinds regs on st with find and fails when the result
// exceeds max.
func checkUnwind(t *testing.T, find Finder, regs Regs, st Stack, max int) {
	t.Helper()
	pcs, stop := Unwind(find, regs, st, nil, max)
	if len(pcs) > max || (max > 0 && len(pcs) == 0 && regs.Valid&(1<<RIP) != 0) || stop < StopEnd || stop > StopBad {
		t.Fatalf("max %d: %d pcs, stop %v", max, len(pcs), stop)
	}
}

// exercise unwinds random registers and stacks on tab's FDEs.
func exercise(t *testing.T, tab *Table, rnd *rand.Rand, n int) {
	find := fileFinder(tab, 0)
	all := func(pc uint64) (*Table, uint64, bool) { return tab, pc, true }
	for i := 0; i < n; i++ {
		st := randStack(rnd)
		regs := randRegs(rnd, st)
		if len(tab.fdes) > 0 {
			f := &tab.fdes[rnd.Intn(len(tab.fdes))]
			regs.R[RIP] = f.lo + uint64(rnd.Int63n(int64(min(f.hi-f.lo, 1<<40))))
		}
		checkUnwind(t, find, regs, st, rnd.Intn(130))
		checkUnwind(t, all, regs, st, rnd.Intn(130))
	}
}

// randStack is random stack bytes, with words that point into it.
func randStack(rnd *rand.Rand) Stack {
	st := Stack{Addr: stackBase, Data: make([]byte, rnd.Intn(1024))}
	rnd.Read(st.Data)
	for o := 0; o+8 <= len(st.Data); o += 8 {
		if rnd.Intn(3) == 0 {
			binary.LittleEndian.PutUint64(st.Data[o:], st.Addr+uint64(rnd.Intn(len(st.Data)+16)))
		}
	}
	return st
}

// randRegs is random registers, some pointing into st.
func randRegs(rnd *rand.Rand, st Stack) Regs {
	var r Regs
	for i := range r.R {
		switch rnd.Intn(3) {
		case 0:
			r.R[i] = rnd.Uint64()
		default:
			r.R[i] = st.Addr + uint64(rnd.Intn(len(st.Data)+16))
		}
	}
	r.Valid = rnd.Uint32()
	if rnd.Intn(4) != 0 {
		r.Valid = 1<<NumRegs - 1
	}
	return r
}

// TestGarbage: random and garbled files into Load, random registers and
// stacks into Unwind on what loads.
func TestGarbage(t *testing.T) {
	rnd := rand.New(rand.NewSource(1))
	// Random bytes, with and without an ELF header.
	for i := 0; i < 300; i++ {
		b := make([]byte, rnd.Intn(4096))
		rnd.Read(b)
		if i%2 == 0 && len(b) > 64 {
			copy(b, mkELF(nil)[:20])
		}
		if tab, err := Load(bytes.NewReader(b), int64(len(b))); err == nil {
			exercise(t, tab, rnd, 5)
		}
	}
	// Garbled .eh_frames: the seed, libc's.
	sections := [][]byte{seedEH()}
	for _, path := range []string{"/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib64/libc.so.6"} {
		if f, err := elf.Open(path); err == nil {
			if s := f.Section(".eh_frame"); s != nil {
				if d, err := s.Data(); err == nil {
					sections = append(sections, d)
				}
			}
			f.Close()
		}
	}
	loaded := 0
	for _, sec := range sections {
		for i := 0; i < 60; i++ {
			eh := append([]byte{}, sec...)
			switch i % 4 {
			case 0: // truncated
				eh = eh[:rnd.Intn(len(eh)+1)]
			case 1: // bytes flipped
				for k := 0; k < 1+rnd.Intn(16); k++ {
					eh[rnd.Intn(len(eh))] ^= byte(1 << rnd.Intn(8))
				}
			case 2: // a run of random bytes
				o := rnd.Intn(len(eh))
				rnd.Read(eh[o:min(len(eh), o+1+rnd.Intn(64))])
			case 3: // instructions garbled, framing kept: random bytes after each entry's id
				for o := 0; o+8 <= len(eh); {
					l := int(binary.LittleEndian.Uint32(eh[o:]))
					if l < 4 || o+4+l > len(eh) {
						break
					}
					if binary.LittleEndian.Uint32(eh[o+4:]) != 0 && l > 12 { // an FDE: keep its range
						rnd.Read(eh[o+4+12 : o+4+l])
						eh[o+4+12] = 0 // no augmentation data
					}
					o += 4 + l
				}
			}
			img := mkELF(eh)
			tab, err := Load(bytes.NewReader(img), int64(len(img)))
			if err != nil {
				continue
			}
			loaded++
			exercise(t, tab, rnd, 20)
		}
	}
	t.Logf("%d garbled .eh_frames loaded and unwound on", loaded)
}

// TestRandomStacks: random registers and stacks on the live processes'
// tables, and the live samples with random bytes in their stacks.
func TestRandomStacks(t *testing.T) {
	rnd := rand.New(rand.NewSource(2))
	for _, shape := range []string{"direct", "qsort"} {
		s := liveSample(t, true, shape)
		for i := 0; i < 2000; i++ {
			st := randStack(rnd)
			regs := randRegs(rnd, st)
			if i%2 == 0 { // a pc in a mapped file
				m := s.maps[rnd.Intn(len(s.maps))]
				regs.R[RIP] = m.start + uint64(rnd.Int63n(int64(m.end-m.start)))
			}
			checkUnwind(t, s.find, regs, st, rnd.Intn(130))
			// The real sample, some stack words replaced.
			st = Stack{Addr: s.st.Addr, Data: append([]byte{}, s.st.Data...)}
			for k := 0; k < 1+rnd.Intn(4); k++ {
				o := rnd.Intn(len(st.Data)/8) * 8
				binary.LittleEndian.PutUint64(st.Data[o:], regs.R[rnd.Intn(NumRegs)])
			}
			checkUnwind(t, s.find, s.regs, st, rnd.Intn(130))
		}
	}
}

// FuzzUnwind fuzzes Load (the .eh_frame of a generated ELF file) and
// Unwind (registers, stack bytes, max) on what loads.
func FuzzUnwind(f *testing.F) {
	st := make([]byte, 64)
	binary.LittleEndian.PutUint64(st[8:], 0x1234)
	f.Add(seedEH(), st, uint64(0x43), uint64(0), uint64(8), uint8(16))
	f.Add(seedEH(), st, uint64(0x80+11), uint64(0), uint64(0), uint8(16))
	f.Add(ehFrame(ehOff, "zRS", x86CIE, fdeSpec{0x40, 0x10, []byte{0x0f, 3, 0x77, 0x10, 0x06, 0x10, 0x10, 2, 0x77, 0x18}}), st, uint64(0x41), uint64(0), uint64(0), uint8(8))
	f.Fuzz(func(t *testing.T, eh, stack []byte, rip, rsp, rbp uint64, max uint8) {
		img := mkELF(eh)
		tab, err := Load(bytes.NewReader(img), int64(len(img)))
		if err != nil {
			return
		}
		s := Stack{Addr: stackBase, Data: stack}
		var regs Regs
		for i := range regs.R {
			regs.R[i] = rip ^ uint64(i)*0x9e3779b97f4a7c15
		}
		regs.R[RIP] = rip
		if len(tab.fdes) > 0 { // a pc in an FDE
			f := &tab.fdes[rip%uint64(len(tab.fdes))]
			regs.R[RIP] = f.lo + (rip>>16)%(f.hi-f.lo)
		}
		regs.R[RSP] = stackBase + rsp%uint64(len(stack)+16)
		regs.R[RBP] = stackBase + rbp%uint64(len(stack)+16)
		regs.Valid = 1<<NumRegs - 1
		checkUnwind(t, fileFinder(tab, 0), regs, s, int(max))
		checkUnwind(t, func(pc uint64) (*Table, uint64, bool) { return tab, pc, true }, regs, s, int(max))
	})
}
