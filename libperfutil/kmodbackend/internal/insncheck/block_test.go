//go:build cgo

package insncheck

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"testing"

	"golang.org/x/arch/x86/x86asm"

	"perfinsp/internal/x86branch"
)

const base = 0x400000

// rel32 encodes target - next as 4 little-endian bytes.
func rel32(next, target uint64) []byte {
	return binary.LittleEndian.AppendUint32(nil, uint32(int32(int64(target-next))))
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// page maps code at base with the rest of its 4 KiB page filled with int3.
func page(code []byte) Mem {
	b := bytes.Repeat([]byte{0xcc}, 4096)
	copy(b, code)
	return Mem{Base: base, Code: b}
}

// TestBlockWalkCases pins the block decoder against what single-stepping
// records for the same run: the block's instruction count, its last
// instruction (the branch) and that branch's kind.
func TestBlockWalkCases(t *testing.T) {
	const S = base
	nop := []byte{0x90}
	// add rax,1; je X (not taken, or taken); nop; jmp Y; X: ...
	notTaken := cat([]byte{0x48, 0x83, 0xc0, 0x01}, []byte{0x74, 0x06}, nop, []byte{0xe9}, rel32(S+12, S+0x100))
	cases := []struct {
		name        string
		m           Mem
		target      uint64
		want        Block
		ok          bool
		steppable   bool
		probe       bool
		scanLen     int
		description string
	}{
		{"jcc not taken, jmp ends the block", page(notTaken), S + 0x100, Block{4, S + 7, int(x86branch.KindJump)}, true, true, true, 4, ""},
		{"jcc taken", page(notTaken), S + 12, Block{2, S + 4, int(x86branch.KindJump)}, true, true, true, 4, ""},
		{"jcc not taken to nowhere", page(notTaken), S + 0x200, Block{}, false, true, true, 4, "the jmp went to S+0x100"},
		{"call to the next instruction", page(cat(nop, []byte{0xe8, 0, 0, 0, 0})), S + 6, Block{2, S + 1, int(x86branch.KindCall)}, true, true, true, 2, ""},
		{"jmp to itself", page([]byte{0xeb, 0xfe}), S, Block{1, S, int(x86branch.KindJump)}, true, true, false, 1, "the first instruction is the branch: no probe"},
		{"nop; jmp to itself", page(cat(nop, []byte{0xeb, 0xfe})), S + 1, Block{2, S + 1, int(x86branch.KindJump)}, true, true, false, 2, "its target is the first's fall-through: no probe"},
		{"ret", page(cat(nop, nop, []byte{0xc3})), 0x7777, Block{3, S + 2, int(x86branch.KindReturn)}, true, true, true, 3, "the probe is told from the ret by sp"},
		{"indirect jmp", page(cat(nop, []byte{0xff, 0xe0})), 0x1234, Block{2, S + 1, int(x86branch.KindJump)}, true, true, false, 2, ""},
		{"rep movsb", page(cat(nop, []byte{0xf3, 0xa4}, []byte{0xc3})), 0x7777, Block{}, false, false, false, 0, "rep: per-iteration traps"},
		{"syscall", page(cat(nop, []byte{0x0f, 0x05}, []byte{0xc3})), 0x7777, Block{}, false, false, false, 0, ""},
		{"two jcc, one target", page(cat([]byte{0x74, 0x04}, []byte{0x75, 0x02}, nop, nop, []byte{0xc3})), S + 6, Block{1, S, int(x86branch.KindJump)}, true, false, false, 0, "ambiguous: single-step it"},
		{"jcc before ret", page(cat([]byte{0x74, 0x01}, nop, []byte{0xc3})), S + 3, Block{1, S, int(x86branch.KindJump)}, true, true, false, 3, "the ret may land on the jcc's target: told apart by sp"},
		{"jcc before jmp *rax", page(cat([]byte{0x74, 0x02}, nop, nop, []byte{0xff, 0xe0})), S + 4, Block{1, S, int(x86branch.KindJump)}, true, false, false, 0, "the jmp may land on the jcc's target, sp the same"},
		{"jcc to its fall-through", page(cat(nop, []byte{0x74, 0x00}, []byte{0xeb, 0xfe})), S + 5, Block{}, false, false, false, 0, "single-step sees no branch"},
		{"jcc to the first's fall-through", page(cat(nop, []byte{0x75, 0xfe}, []byte{0xeb, 0x10})), S + 1, Block{2, S + 1, int(x86branch.KindJump)}, true, true, false, 3, "a loop back to the second instruction: no probe"},
	}
	for _, c := range cases {
		got, ok := c.m.Walk(S, c.target)
		if ok != c.ok || (ok && got != c.want) {
			t.Errorf("%s: walk to %#x = %+v ok %v, want %+v ok %v %s", c.name, c.target, got, ok, c.want, c.ok, c.description)
		}
		sc := c.m.Scan(S)
		if sc.Steppable != c.steppable || sc.Probe != c.probe || (c.steppable && sc.Len != c.scanLen) {
			t.Errorf("%s: scan %+v, want steppable %v probe %v len %d %s", c.name, sc, c.steppable, c.probe, c.scanLen, c.description)
		}
	}
}

// TestBlockAcrossPage: a block whose instructions cross into the next page
// decodes when both pages are mapped; with the second unmapped it is not
// steppable and its walk fails (the instruction cannot be read whole).
func TestBlockAcrossPage(t *testing.T) {
	const S = base + 4096 - 8
	b := bytes.Repeat([]byte{0xcc}, 8192)
	copy(b[4096-8:], cat(bytes.Repeat([]byte{0x90}, 6), []byte{0x48, 0xb8, 1, 2, 3, 4, 5, 6, 7, 8}, []byte{0xc3}))
	both := Mem{Base: base, Code: b}
	want := Block{8, base + 4096 + 8, int(x86branch.KindReturn)}
	if got, ok := both.Walk(S, 0x5555); !ok || got != want {
		t.Errorf("across the page: walk %+v ok %v, want %+v", got, ok, want)
	}
	if sc := both.Scan(S); !sc.Steppable || sc.Len != 8 {
		t.Errorf("across the page: scan %+v, want steppable, 8 instructions", sc)
	}
	if got, ok := both.WalkTo(S, base+4096-2); !ok || got.Count != 6 || got.Last != base+4096-3 {
		t.Errorf("across the page: walk to the movabs = %+v ok %v, want 6 nops", got, ok)
	}
	first := Mem{Base: base, Code: b[:4096]}
	if got, ok := first.Walk(S, 0x5555); ok {
		t.Errorf("second page unmapped: walk %+v, want a failure", got)
	}
	if sc := first.Scan(S); sc.Steppable {
		t.Errorf("second page unmapped: scan %+v, want not steppable", sc)
	}
}

// TestBlockWalkTo: an interrupt in the middle of a block: the instructions
// before the interrupted ip, none past an unconditional branch.
func TestBlockWalkTo(t *testing.T) {
	const S = base
	m := page(cat([]byte{0x90, 0x90}, []byte{0x74, 0x10}, []byte{0x90}, []byte{0xc3}, []byte{0x90}))
	for _, c := range []struct {
		ip    uint64
		count int
		ok    bool
	}{{S, 0, true}, {S + 1, 1, true}, {S + 4, 3, true}, {S + 5, 4, true}, {S + 6, 0, false}, {S + 3, 0, false}} {
		got, ok := m.WalkTo(S, c.ip)
		if ok != c.ok || (ok && got.Count != c.count) {
			t.Errorf("walk to %#x: %+v ok %v, want count %d ok %v", c.ip, got, ok, c.count, c.ok)
		}
	}
}

// TestBlockBound: a line longer than PT_BLOCK_MAX instructions is
// single-stepped, and its walk gives up; one of exactly PT_BLOCK_MAX is
// walked.
func TestBlockBound(t *testing.T) {
	line := func(nops int) Mem {
		code := cat(bytes.Repeat([]byte{0x90}, nops), []byte{0xc3})
		return Mem{Base: base, Code: append(code, bytes.Repeat([]byte{0xcc}, 4096-len(code)%4096)...)}
	}
	long := line(BlockMax)
	if sc := long.Scan(base); sc.Steppable {
		t.Errorf("%d nops and ret: scan %+v, want not steppable", BlockMax, sc)
	}
	if got, ok := long.Walk(base, 0x1000); ok {
		t.Errorf("%d nops and ret: walk %+v, want a failure at the bound", BlockMax, got)
	}
	if got, ok := line(BlockMax-1).Walk(base, 0x1000); !ok || got.Count != BlockMax {
		t.Errorf("%d nops and ret: walk %+v ok %v, want %d instructions", BlockMax-1, got, ok, BlockMax)
	}
	if sc := line(BlockMax - 1).Scan(base); !sc.Steppable || sc.Len != BlockMax {
		t.Errorf("%d nops and ret: scan %+v, want steppable, %d instructions", BlockMax-1, sc, BlockMax)
	}
}

// sweepAgreeing calls f, file by file, for every instruction of the
// corpus that x86asm and the module's decoder read with the same length
// (code is the instruction's bytes), then done with the file's name.
func sweepAgreeing(t *testing.T, f func(code []byte, in x86asm.Inst, where string), done func(file string)) {
	for path, text := range corpus(t) {
		file := filepath.Base(path)
		for off := 0; off < len(text); {
			code := text[off:min(off+16, len(text))]
			n := Decode(code).Len
			if in, err := x86asm.Decode(code, 64); err == nil && n == in.Len {
				f(code[:n], in, fmt.Sprintf("%s+%#x", file, off))
			}
			off += max(n, 1)
		}
		done(file)
	}
}

// TestBranchTargetsAgreeWithX86asm sweeps the corpus (as
// TestDecoderAgreesWithX86asm) and checks every relative branch's
// displacement against x86asm's, and that exactly the conditional ones
// (jcc, loop, jrcxz, xbegin) are marked so: the block decoder's ends.
func TestBranchTargetsAgreeWithX86asm(t *testing.T) {
	var nrel, mism int
	sweepAgreeing(t, func(code []byte, in x86asm.Inst, where string) {
		br := DecodeBranch(code)
		rel, isRel := in.Args[0].(x86asm.Rel)
		cond := in.Op >= x86asm.JA && in.Op <= x86asm.JS && in.Op != x86asm.JMP || in.Op == x86asm.LOOP || in.Op == x86asm.LOOPE || in.Op == x86asm.LOOPNE
		direct := isRel && in.DataSize != 16
		if in.Op == x86asm.XBEGIN { // an abort may jump: never block-stepped
			cond, direct = true, false
		}
		if isRel {
			nrel++
		}
		if br.Direct != direct || (direct && br.Rel != int(rel)) || (isRel && br.Cond != cond) {
			mism++
			if mism < 10 {
				t.Errorf("%s % x (%v): module cond %v direct %v rel %d; x86asm rel %v %d cond %v", where, code, in, br.Cond, br.Direct, br.Rel, isRel, rel, cond)
			}
		}
	}, func(file string) {
		t.Logf("%s: %d relative branches, %d mismatches", file, nrel, mism)
		if nrel < 1000 || mism > 0 {
			t.Errorf("%s: %d relative branches, %d mismatches", file, nrel, mism)
		}
		nrel, mism = 0, 0
	})
}

// TestStackPointerChanges pins the decoder's stack pointer changes, which
// tell a ret from a jcc to the same ip: pushes, pops, call and ret, add and
// sub of rsp; every other write of rsp (and any rsp operand) is unknown.
func TestStackPointerChanges(t *testing.T) {
	for _, c := range []struct {
		code  []byte
		known bool
		sp    int
	}{
		{[]byte{0x55}, true, -8},                           // push rbp
		{[]byte{0x41, 0x54}, true, -8},                     // push r12
		{[]byte{0x5d}, true, 8},                            // pop rbp
		{[]byte{0x41, 0x5c}, true, 8},                      // pop r12
		{[]byte{0x5c}, false, 0},                           // pop rsp
		{[]byte{0x66, 0x55}, false, 0},                     // push bp (2 bytes)
		{[]byte{0x6a, 0x01}, true, -8},                     // push 1
		{[]byte{0x9c}, true, -8},                           // pushf
		{[]byte{0x9d}, true, 8},                            // popf
		{[]byte{0xff, 0x75, 0x08}, true, -8},               // push [rbp+8]
		{[]byte{0x8f, 0x45, 0x08}, true, 8},                // pop [rbp+8]
		{[]byte{0x48, 0x83, 0xec, 0x18}, true, -0x18},      // sub rsp, 0x18
		{[]byte{0x48, 0x83, 0xc4, 0x18}, true, 0x18},       // add rsp, 0x18
		{[]byte{0x48, 0x81, 0xec, 0, 1, 0, 0}, true, -256}, // sub rsp, 256
		{[]byte{0x83, 0xc4, 0x18}, false, 0},               // add esp, 0x18
		{[]byte{0x48, 0x83, 0xe4, 0xf0}, false, 0},         // and rsp, -16
		{[]byte{0xc9}, false, 0},                           // leave
		{[]byte{0x48, 0x89, 0xec}, false, 0},               // mov rsp, rbp
		{[]byte{0x48, 0x8d, 0x64, 0x24, 0x08}, false, 0},   // lea rsp, [rsp+8]
		{[]byte{0x48, 0x94}, false, 0},                     // xchg rax, rsp
		{[]byte{0x48, 0x8b, 0x04, 0x24}, true, 0},          // mov rax, [rsp]
		{[]byte{0x4c, 0x89, 0xe0}, true, 0},                // mov rax, r12
		{[]byte{0xe8, 0, 0, 0, 0}, true, -8},               // call
		{[]byte{0xff, 0xd0}, true, -8},                     // call rax
		{[]byte{0xc3}, true, 8},                            // ret
		{[]byte{0xc2, 0x10, 0x00}, true, 24},               // ret 16
		{[]byte{0xcb}, false, 0},                           // far ret
		{[]byte{0x74, 0x05}, true, 0},                      // je
	} {
		got := DecodeBranch(c.code)
		if got.SPKnown != c.known || (c.known && got.SP != c.sp) {
			t.Errorf("% x: sp known %v change %d, want known %v change %d", c.code, got.SPKnown, got.SP, c.known, c.sp)
		}
	}
}

// TestBlockRetAfterJcc: the loop of a leaf call (add; cmp; jne back; pop;
// ret): the jne and the ret may reach the same ip, but with different stack
// pointers: the line is block-steppable, the walk tells them apart by sp,
// and without the stack pointer it cannot.
func TestBlockRetAfterJcc(t *testing.T) {
	const S = base + 0x10
	// S: add rbp,rax; add rbx,1; cmp r12,rbx; jne S-6; pop rbx; pop rbp; ret
	code := cat([]byte{0x48, 0x01, 0xc5}, []byte{0x48, 0x83, 0xc3, 0x01}, []byte{0x49, 0x39, 0xdc}, []byte{0x75, 0xe7}, []byte{0x5b, 0x5d, 0xc3})
	b := bytes.Repeat([]byte{0xcc}, 4096)
	copy(b[0x10:], code)
	m := Mem{Base: base, Code: b}
	jneTarget := uint64(S + 12 - 0x19)
	sc := m.Scan(S)
	if !sc.Steppable || !sc.NeedsSP || sc.Len != 7 {
		t.Fatalf("scan %+v, want steppable by the stack pointer, 7 instructions", sc)
	}
	if got, ok := m.WalkSP(S, jneTarget, 0); !ok || got != (Block{4, S + 10, int(x86branch.KindJump)}) {
		t.Errorf("jne taken (sp as at the start): %+v ok %v", got, ok)
	}
	if got, ok := m.WalkSP(S, jneTarget, 24); !ok || got != (Block{7, S + 14, int(x86branch.KindReturn)}) {
		t.Errorf("ret to the jne's target (sp +24): %+v ok %v", got, ok)
	}
	if got, ok := m.WalkSP(S, 0x777777, 24); !ok || got.Count != 7 {
		t.Errorf("ret elsewhere: %+v ok %v", got, ok)
	}
	if got, ok := m.WalkSP(S, 0x777777, 8); ok {
		t.Errorf("ret with the wrong stack pointer: %+v, want a failure", got)
	}
	// a leave before the ret: the stack pointer at the ret is unknown
	code[len(code)-3] = 0xc9
	copy(b[0x10:], code)
	if sc := (Mem{Base: base, Code: b}).Scan(S); sc.Steppable {
		t.Errorf("with leave: scan %+v, want not steppable", sc)
	}
}

// TestStackPointerAgreesWithX86asm sweeps the corpus: wherever the module's
// decoder claims to know an instruction's change of the stack pointer, it
// must be x86asm's reading of it: pushes and pops 8, call -8, ret 8 (+ its
// immediate), add/sub rsp of an immediate, and 0 for every other
// instruction, which then must not name rsp as its destination; leave,
// enter and iret are never known.
func TestStackPointerAgreesWithX86asm(t *testing.T) {
	isSP := func(a x86asm.Arg) bool { return a == x86asm.RSP || a == x86asm.ESP || a == x86asm.SP }
	var known, mism int
	sweepAgreeing(t, func(code []byte, in x86asm.Inst, where string) {
		br := DecodeBranch(code)
		if !br.SPKnown {
			return
		}
		known++
		want, ok := 0, true
		switch in.Op {
		case x86asm.PUSH, x86asm.PUSHFQ, x86asm.CALL:
			want = -8
		case x86asm.POP, x86asm.POPFQ:
			want = 8
		case x86asm.RET:
			want = 8
			if imm, isImm := in.Args[0].(x86asm.Imm); isImm {
				want += int(imm)
			}
		case x86asm.LEAVE, x86asm.ENTER, x86asm.IRETQ, x86asm.IRET, x86asm.IRETD, x86asm.LRET:
			ok = false
		case x86asm.ADD, x86asm.SUB:
			if imm, isImm := in.Args[1].(x86asm.Imm); isImm && in.Args[0] == x86asm.RSP {
				want = int(imm)
				if in.Op == x86asm.SUB {
					want = -want
				}
			} else if isSP(in.Args[0]) {
				ok = false
			}
		default:
			if isSP(in.Args[0]) && in.Op != x86asm.CMP && in.Op != x86asm.TEST {
				ok = false // writes the stack pointer
			}
		}
		if !ok || br.SP != want {
			mism++
			if mism < 10 {
				t.Errorf("%s % x (%v): module knows sp change %d, x86asm: %d (knowable %v)", where, code, in, br.SP, want, ok)
			}
		}
	}, func(file string) {
		t.Logf("%s: %d instructions with a known sp change, %d mismatches", file, known, mism)
		if known < 10000 || mism > 0 {
			t.Errorf("%s: %d known, %d mismatches", file, known, mism)
		}
		known, mism = 0, 0
	})
}
