package x86branch

import (
	"strings"
	"testing"
)

// memory is a fake address space of 4 KB pages; reads stop at the first
// unmapped byte, as process_vm_readv's do.
type memory struct {
	pages map[uint64][]byte
	reads int
}

func (m *memory) put(addr uint64, code ...byte) {
	for i, c := range code {
		a := addr + uint64(i)
		p := m.pages[a&^4095]
		if p == nil {
			p = make([]byte, 4096)
			m.pages[a&^4095] = p
		}
		p[a&4095] = c
	}
}

func (m *memory) read(addr uint64, buf []byte) int {
	m.reads++
	n := 0
	for n < len(buf) {
		a := addr + uint64(n)
		p := m.pages[a&^4095]
		if p == nil {
			break
		}
		n += copy(buf[n:], p[a&4095:])
	}
	return min(n, len(buf))
}

func TestBlockDecoder(t *testing.T) {
	m := &memory{pages: map[uint64][]byte{}}
	// A not-taken jcc inside a block.
	m.put(0x1000,
		0x48, 0x01, 0xf8, // 1000 add %rdi,%rax
		0x74, 0x05, //       1003 je 100a
		0x48, 0xff, 0xc0, // 1005 inc %rax
		0xeb, 0x10, //       1008 jmp 101a
		0x90) //             100a nop
	// A call to the next instruction.
	m.put(0x2000, 0xe8, 0, 0, 0, 0, 0x58) // call 2005; pop %rax
	// A jump to itself after a nop.
	m.put(0x3000, 0x90, 0xeb, 0xfe) // nop; 3001 jmp 3001
	// A rep string instruction.
	m.put(0x4000, 0x48, 0x89, 0xc1, 0xf3, 0xa4, 0xc3) // mov %rax,%rcx; rep movsb; ret
	// A block crossing a page: inc at 4fff takes 4fff..5001.
	m.put(0x4ffc, 0x48, 0x01, 0xf8, 0x48, 0xff, 0xc0, 0xc3) // add; inc; 5002 ret
	// Two branches to one target: the stop cannot say which.
	m.put(0x6000, 0x74, 0x04, 0x75, 0x02, 0xeb, 0xfe) // je 6006; jne 6006; jmp 6004
	// A jcc to its own fall-through, a system call.
	m.put(0x7000, 0x74, 0x00, 0xc3)       // je 7002; ret
	m.put(0x7100, 0x90, 0x0f, 0x05, 0xc3) // nop; syscall; ret
	// An instruction cut by an unmapped page.
	m.put(0x8ffe, 0x90, 0x48) // nop; a REX prefix, its instruction cut by the unmapped 9000 page
	// A conditional jump, then an indirect transfer (ret).
	m.put(0xa000, 0x85, 0xc0, 0x74, 0x03, 0x90, 0x90, 0xc3) // test; je a007; nop; nop; ret
	// The end of an AVX2 string function, and a switch.
	m.put(0xb000, 0xc5, 0xf8, 0x77, 0xc3)                                           // vzeroupper; ret
	m.put(0xc000, 0x83, 0xf9, 0x07, 0x77, 0x10, 0x48, 0x63, 0x0c, 0x8a, 0xff, 0xe1) // cmp $7,%ecx; ja; movslq; jmp *%rcx
	// cpuid, whose single-step trap a hypervisor may lose.
	m.put(0xd000, 0x0f, 0xa2, 0x89, 0xc6, 0x74, 0x10, 0xc3) // cpuid; mov %eax,%esi; je d016; ret

	d := NewDecoder()
	type want struct {
		stop uint64
		how  How
		n    uint32
		last uint64
		kind Kind
		amb  bool
	}
	for _, c := range []struct {
		name      string
		start     uint64
		steppable bool
		why       string
		probe     bool
		ends      []want
	}{
		{"not-taken jcc inside", 0x1000, true, "", true, []want{
			{0x101a, Taken, 4, 0x1008, KindJump, false}, // je not taken, jmp taken
			{0x100a, Taken, 2, 0x1003, KindJump, false}, // je taken
			{0x1003, FellThrough, 1, 0x1000, KindPlain, false},
			{0x9999, NoMatch, 0, 0, 0, false},
		}},
		{"from the middle (after a single step)", 0x1005, true, "", true, []want{
			{0x101a, Taken, 2, 0x1008, KindJump, false},
			{0x1008, FellThrough, 1, 0x1005, KindPlain, false},
		}},
		{"call to the next instruction", 0x2000, true, "", false, []want{
			{0x2005, Taken, 1, 0x2000, KindCall, false},
		}},
		{"jmp to self after a nop", 0x3000, true, "", false, []want{
			{0x3001, Taken, 2, 0x3001, KindJump, false}, // not a fall-through: the jmp ran
		}},
		{"jmp to self", 0x3001, true, "", false, []want{
			{0x3001, Taken, 1, 0x3001, KindJump, false},
		}},
		{"rep", 0x4000, false, "rep", false, nil},
		{"after rep", 0x4005, true, "", false, []want{{0x1234, Taken, 1, 0x4005, KindReturn, false}}},
		{"across a page", 0x4ffc, true, "", false, []want{
			{0x1234, Taken, 3, 0x5002, KindReturn, false},
		}},
		{"two branches to one target", 0x6000, false, "same target", false, nil},
		{"jcc to its fall-through", 0x7000, false, "own fall-through", false, nil},
		{"system call", 0x7100, false, "system call", false, nil},
		{"cut by an unmapped page", 0x8ffe, false, "cannot decode", false, nil},
		{"jcc, then ret", 0xa000, true, "", false, []want{
			{0xa007, Taken, 2, 0xa002, KindJump, true}, // je's target, or ret's: the je traps first
			{0x5555, Taken, 5, 0xa006, KindReturn, false},
		}},
		{"vzeroupper; ret", 0xb000, true, "", false, []want{{0x1234, Taken, 2, 0xb003, KindReturn, false}}},
		{"switch", 0xc000, false, "switch", false, nil},
	} {
		b := d.Block(m.read, c.start)
		if b.Steppable != c.steppable || b.Probe != c.probe || !strings.Contains(b.Why, c.why) {
			t.Errorf("%s: steppable %v probe %v why %q; want %v %v %q", c.name, b.Steppable, b.Probe, b.Why, c.steppable, c.probe, c.why)
			continue
		}
		for _, w := range c.ends {
			got := b.End(w.stop)
			exp := BlockEnd{How: w.how, N: w.n, Last: w.last, Kind: w.kind, Ambiguous: w.amb}
			if got != exp {
				t.Errorf("%s: stop %#x: %+v, want %+v", c.name, w.stop, got, exp)
			}
		}
	}

	// A block step stopped mid-way (a signal): the instructions before it.
	b := d.Block(m.read, 0x1000)
	for _, c := range []struct {
		stop uint64
		n    uint32
		last uint64
		ok   bool
	}{{0x1000, 0, 0, true}, {0x1003, 1, 0x1000, true}, {0x1005, 2, 0x1003, true}, {0x1008, 3, 0x1005, true}, {0x100a, 0, 0, false}, {0x101a, 0, 0, false}} {
		n, last, ok := b.FallThrough(c.stop)
		if n != c.n || last != c.last || ok != c.ok {
			t.Errorf("fall-through to %#x: %d %#x %v, want %d %#x %v", c.stop, n, last, ok, c.n, c.last, c.ok)
		}
	}

	// A single step of cpuid whose trap was lost: the stop is after the
	// mov (2 instructions, no branch) or after the taken je (3, a branch).
	if !d.Insn(m.read, 0xd000).Emulated {
		t.Error("cpuid is not marked Emulated")
	}
	for _, c := range []struct {
		stop uint64
		want BlockEnd
		ok   bool
	}{
		{0xd004, BlockEnd{How: FellThrough, N: 2, Last: 0xd002}, true},
		{0xd016, BlockEnd{How: Taken, N: 3, Last: 0xd004, Kind: KindJump, Ambiguous: true}, true}, // or the ret: the tracer reads the stack
		{0xd002, BlockEnd{}, false}, // the trap was not lost: one instruction
	} {
		if got, ok := d.Overran(m.read, 0xd000, c.stop); got != c.want || ok != c.ok {
			t.Errorf("cpuid overran to %#x: %+v %v, want %+v %v", c.stop, got, ok, c.want, c.ok)
		}
	}

	// Blocks repeat: the second decode reads nothing.
	r := m.reads
	for range 1000 {
		d.Block(m.read, 0x1000).End(0x101a)
	}
	if m.reads != r {
		t.Errorf("a cached block read the code again (%d reads)", m.reads-r)
	}
}

// BenchmarkBlockEnd: the decoder's cost per block step once the block is
// cached (leaf_loop's loop tail: add; add; cmp; jne; mov; pop x3; ret),
// what block mode adds to each stop besides the trap itself.
func BenchmarkBlockEnd(b *testing.B) {
	m := &memory{pages: map[uint64][]byte{}}
	m.put(0x1226, 0x48, 0x01, 0xc5, 0x48, 0x83, 0xc3, 0x01, 0x49, 0x39, 0xdc, 0x75, 0xec,
		0x48, 0x89, 0xe8, 0x5b, 0x5d, 0x41, 0x5c, 0xc3)
	d := NewDecoder()
	if e := d.Block(m.read, 0x1226).End(0x121e); e.How != Taken || e.N != 4 {
		b.Fatalf("loop tail: %+v", e)
	}
	for b.Loop() {
		d.Block(m.read, 0x1226).End(0x121e)
	}
}
