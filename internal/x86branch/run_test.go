package x86branch

import (
	"testing"

	"golang.org/x/arch/x86/x86asm"
)

// fakeRegs is a stopped thread for Next.
type fakeRegs struct {
	r     map[x86asm.Reg]uint64
	flags uint64
	fs    uint64
	mem   map[uint64]uint64
}

func (f fakeRegs) Reg(r x86asm.Reg) uint64 { return f.r[r] }
func (f fakeRegs) Flags() uint64           { return f.flags }
func (f fakeRegs) Segment(r x86asm.Reg) uint64 {
	if r == x86asm.FS {
		return f.fs
	}
	return 0
}
func (f fakeRegs) Read8(a uint64) (uint64, bool) { v, ok := f.mem[a]; return v, ok }

// TestRunNext: the straight line up to its first branch, and where the
// branch goes from the registers at a stop before it.
func TestRunNext(t *testing.T) {
	m := &memory{pages: map[uint64][]byte{}}
	d := NewDecoder()
	// add; inc; je 0x1010 (jcc ends the line: not run through)
	m.put(0x1000, 0x48, 0x01, 0xf8, 0x48, 0xff, 0xc0, 0x74, 0x08, 0x90)
	r := d.Run(m.read, 0x1000)
	if r.N != 2 || r.Last != 0x1003 || r.End.Addr != 0x1006 || !r.Branch || r.Cut {
		t.Fatalf("line from 0x1000: %+v", r)
	}
	// The flags decide each jcc: taken goes to the target, else the
	// fall-through.
	jccs := []struct {
		code  byte // short jcc opcode
		flags uint64
		taken bool
	}{
		{0x74, flagZF, true}, {0x74, 0, false}, // je
		{0x75, 0, true}, {0x75, flagZF, false}, // jne
		{0x72, flagCF, true}, {0x73, flagCF, false}, // jb, jae
		{0x76, flagZF, true}, {0x77, flagCF, false}, {0x77, 0, true}, // jbe, ja
		{0x78, flagSF, true}, {0x79, flagSF, false}, // js, jns
		{0x7a, flagPF, true}, {0x7b, flagPF, false}, // jp, jnp
		{0x70, flagOF, true}, {0x71, flagOF, false}, // jo, jno
		{0x7c, flagSF, true}, {0x7c, flagSF | flagOF, false}, // jl
		{0x7d, flagSF | flagOF, true}, {0x7d, flagOF, false}, // jge
		{0x7e, flagZF, true}, {0x7e, flagSF, true}, {0x7e, 0, false}, // jle
		{0x7f, 0, true}, {0x7f, flagZF, false}, {0x7f, flagSF, false}, // jg
	}
	for i, c := range jccs {
		a := uint64(0x2000 + 0x10*i)
		m.put(a, c.code, 0x05)
		in := NewDecoder().Insn(m.read, a)
		if !evaluable(in) {
			t.Fatalf("jcc %#x not evaluable: %+v", c.code, in)
		}
		want := a + 2
		if c.taken {
			want = a + 7
		}
		if got, ok := Next(in, fakeRegs{flags: c.flags}); !ok || got != want {
			t.Errorf("jcc %#x with flags %#x: %#x %v, want %#x", c.code, c.flags, got, ok, want)
		}
	}
	// jrcxz; a direct call; ret; jmp *%rax; call *0x8(%rbx,%rcx,8);
	// jmp *0x10(%rip); jmp *%fs:0x28.
	m.put(0x3000, 0xe3, 0x10) // jrcxz 0x3012
	m.put(0x3100, 0xe8, 0xfb, 0x0e, 0, 0)
	m.put(0x3200, 0xc3)
	m.put(0x3300, 0xff, 0xe0)
	m.put(0x3400, 0xff, 0x54, 0xcb, 0x08)
	m.put(0x3500, 0xff, 0x25, 0x10, 0, 0, 0)
	m.put(0x3600, 0x64, 0xff, 0x24, 0x25, 0x28, 0, 0, 0)
	regs := fakeRegs{
		r:   map[x86asm.Reg]uint64{x86asm.RCX: 2, x86asm.RSP: 0x7000, x86asm.RAX: 0xaaaa, x86asm.RBX: 0x8000},
		fs:  0x9000,
		mem: map[uint64]uint64{0x7000: 0xbbbb, 0x8000 + 8 + 16: 0xcccc, 0x3506 + 0x10: 0xdddd, 0x9028: 0xeeee},
	}
	for _, c := range []struct {
		addr, want uint64
	}{
		{0x3000, 0x3002}, {0x3100, 0x4000}, {0x3200, 0xbbbb}, {0x3300, 0xaaaa}, {0x3400, 0xcccc}, {0x3500, 0xdddd}, {0x3600, 0xeeee},
	} {
		in := d.Insn(m.read, c.addr)
		if !evaluable(in) {
			t.Errorf("%#x: not evaluable: %+v", c.addr, in)
			continue
		}
		if got, ok := Next(in, regs); !ok || got != c.want {
			t.Errorf("%#x (%v): %#x %v, want %#x", c.addr, in.Op, got, ok, c.want)
		}
	}
	regs.r[x86asm.RCX] = 0
	if got, _ := Next(d.Insn(m.read, 0x3000), regs); got != 0x3012 {
		t.Errorf("jrcxz with rcx 0: %#x, want 0x3012", got)
	}
	// A memory operand that cannot be read.
	delete(regs.mem, 0x7000)
	if _, ok := Next(d.Insn(m.read, 0x3200), regs); ok {
		t.Error("ret with an unreadable stack: evaluated")
	}
	// Stepped, not evaluated: syscall, rep movsb, popf, loop, a jcc to its
	// own fall-through, ud2, an encoding x86asm cannot decode (0x06 is not
	// an instruction in 64-bit mode).
	for _, code := range [][]byte{{0x0f, 0x05}, {0xf3, 0xa4}, {0x9d}, {0xe2, 0x10}, {0x74, 0x00}, {0x0f, 0x0b}, {0x06}} {
		m.put(0x5000, append(append([]byte{0x90}, code...), 0xc3)...)
		dd := NewDecoder()
		r := dd.Run(m.read, 0x5000)
		if r.N != 1 || r.End.Addr != 0x5001 || r.Branch {
			t.Errorf("% x: line %+v; want 1 instruction, then the end stepped", code, r)
		}
	}
	// A line cut by a stop: the instructions up to it.
	if n, last, ok := d.Along(m.read, d.Run(m.read, 0x1000), 0x1003); !ok || n != 1 || last != 0x1000 {
		t.Errorf("cut at 0x1003: %d %#x %v, want 1 0x1000 true", n, last, ok)
	}
	if _, _, ok := d.Along(m.read, d.Run(m.read, 0x1000), 0x1004); ok {
		t.Error("cut inside an instruction: accepted")
	}
	// A line longer than MaxBlock is cut there.
	for i := 0; i < MaxBlock+2; i++ {
		m.put(0x10000+uint64(i), 0x90)
	}
	if r := d.Run(m.read, 0x10000); r.N != MaxBlock || !r.Cut || r.Branch || r.End.Addr != 0x10000+MaxBlock {
		t.Errorf("long line: N %d cut %v end %#x", r.N, r.Cut, r.End.Addr)
	}
}
