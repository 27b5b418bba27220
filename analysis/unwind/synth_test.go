package unwind

import (
	"debug/elf"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// fileFinder is a Finder for one file loaded at bias (runtime address =
// link-time address + bias).
func fileFinder(t *Table, bias uint64) Finder {
	return func(pc uint64) (*Table, uint64, bool) {
		v := pc - bias
		for _, l := range t.loads {
			if v >= l.vaddr && v-l.vaddr < l.end-l.off {
				return t, v - l.vaddr + l.off, true
			}
		}
		return nil, 0, false
	}
}

// openTable loads path's Table and its symbols by name (local labels too).
func openTable(tb testing.TB, path string) (*Table, map[string]uint64, *elf.File) {
	tb.Helper()
	t, _, err := loadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	ef, err := elf.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ef.Close() })
	syms := map[string]uint64{}
	s, _ := ef.Symbols()
	for _, x := range s {
		syms[x.Name] = x.Value
	}
	return t, syms, ef
}

// stackOf makes a stack copy at addr holding the words w.
func stackOf(addr uint64, w ...uint64) Stack {
	b := make([]byte, 8*len(w))
	for i, x := range w {
		binary.LittleEndian.PutUint64(b[8*i:], x)
	}
	return Stack{Addr: addr, Data: b}
}

// regsOf makes a register set from pairs register, value.
func regsOf(kv ...uint64) Regs {
	var r Regs
	for i := 0; i+1 < len(kv); i += 2 {
		r.R[kv[i]] = kv[i+1]
		r.Valid |= 1 << kv[i]
	}
	return r
}

const stackBase = 0x7ffd00000000

// TestPLT unwinds from pcs inside .plt, whose CFA is the expression
// rsp+8 + ((rip&15) >= 11) << 3: the return address is at [rsp] before an
// entry's push and at [rsp+8] after it.
func TestPLT(t *testing.T) {
	for _, pie := range []bool{false, true} {
		exe := buildProg(t, pie, "")
		tab, syms, ef := openTable(t, exe)
		plt := ef.Section(".plt")
		if plt == nil || plt.Size < 32 {
			t.Fatalf("%s has no .plt entries", exe)
		}
		bias := uint64(0)
		if pie {
			bias = 0x555555554000
		}
		find := fileFinder(tab, bias)
		main := syms["main"] + bias
		ra, decoy := main+9, main+1 // a return address into main; something else
		entry := plt.Addr + 16      // the first entry after PLT0
		for _, c := range []struct {
			off   uint64 // in the entry
			stack []uint64
		}{
			{0, []uint64{ra, decoy, 0, 0}},  // jmp *GOT: nothing pushed
			{6, []uint64{ra, decoy, 0, 0}},  // push $index
			{11, []uint64{5, ra, decoy, 0}}, // jmp PLT0: the index pushed
		} {
			pc := entry + c.off + bias
			v := entry + c.off
			f := tab.find(v)
			if f == nil {
				t.Fatalf("no FDE covers .plt+%#x", 16+c.off)
			}
			var scratch row
			r, ok := tab.rowAt(f, v, &scratch)
			if !ok || r.cfa.kind&^fromCIE != kExpr {
				t.Fatalf(".plt+%#x: CFA rule %+v, want an expression", 16+c.off, r.cfa)
			}
			regs := regsOf(RIP, pc, RSP, stackBase, RBP, 0)
			pcs, stop := Unwind(find, regs, stackOf(stackBase, c.stack...), nil, 8)
			if len(pcs) < 2 || pcs[1] != ra {
				t.Errorf("pie %v, .plt+%#x: unwound %x (%v), want the caller %#x second", pie, 16+c.off, pcs, stop, ra)
			}
		}
	}
}

// cfiAsm exercises CFA program rules: functions with labels at points of
// known rules.
const cfiAsm = `
	.text
	.globl f1
	.type f1, @function
f1:
	.cfi_startproc
	pushq %rbx
	.cfi_def_cfa_offset 16
	.cfi_offset rbx, -16
	pushq %rbp
	.cfi_def_cfa_offset 24
	.cfi_offset rbp, -24
	movq %rsp, %rbp
	.cfi_def_cfa_register rbp
f1_p1:	nop
	.cfi_remember_state
	popq %rbp
	.cfi_def_cfa rsp, 16
	.cfi_restore rbp
f1_p2:	nop
	.cfi_restore_state
f1_p3:	nop
	ret
	.cfi_endproc
	.size f1, .-f1

	.globl f2
	.type f2, @function
f2:
	.cfi_startproc
	nop
	.cfi_register rip, r11
	.cfi_val_offset rbx, -8
	.cfi_escape 0x10, 0x0c, 0x02, 0x77, 0x10   /* DW_CFA_expression r12: breg7(rsp)+16 */
	.cfi_escape 0x16, 0x0d, 0x02, 0x23, 0x20   /* DW_CFA_val_expression r13: CFA plus_uconst 32 */
	.cfi_undefined r14
	.cfi_same_value r15
	.cfi_same_value r10
f2_p1:	nop
	ret
	.cfi_endproc
	.size f2, .-f2

	/* A signal trampoline: CFA and RIP in a "context" at rsp+16. */
	.globl sig
	.type sig, @function
	nop
sig:
	.cfi_startproc
	.cfi_signal_frame
	.cfi_escape 0x0f, 0x03, 0x77, 0x10, 0x06   /* DW_CFA_def_cfa_expression: breg7(rsp)+16; deref */
	.cfi_escape 0x10, 0x10, 0x02, 0x77, 0x18   /* DW_CFA_expression rip: breg7(rsp)+24 */
	.cfi_escape 0x10, 0x07, 0x02, 0x77, 0x10   /* DW_CFA_expression rsp: breg7(rsp)+16 */
	nop
sig_p1:	nop
	ret
	.cfi_endproc
	.size sig, .-sig

	/* Code without CFI right before g: g-1 has no FDE. */
	.byte 0x90, 0x90
	.globl g
	.type g, @function
g:
	.cfi_startproc
	nop
	ret
	.cfi_endproc
	.size g, .-g

	/* An epilogue whose CFI keeps rbx's save rule after the pop (as
	   glibc's msort_with_tmp): the slot is below the stack pointer. */
	.globl f3
	.type f3, @function
f3:
	.cfi_startproc
	pushq %rbx
	.cfi_def_cfa_offset 16
	.cfi_offset rbx, -16
	nop
	popq %rbx
	.cfi_def_cfa_offset 8
f3_p1:	nop
	ret
	.cfi_endproc
	.size f3, .-f3

	/* A frame-pointer function, for a loop. */
	.globl fp
	.type fp, @function
fp:
	.cfi_startproc
	pushq %rbp
	.cfi_def_cfa_offset 16
	.cfi_offset rbp, -16
	movq %rsp, %rbp
	.cfi_def_cfa_register rbp
fp_p1:	nop
	popq %rbp
	.cfi_def_cfa rsp, 8
	ret
	.cfi_endproc
	.size fp, .-fp
`

// buildAsm assembles cfiAsm into a shared object.
func buildAsm(tb testing.TB) string {
	tb.Helper()
	needGCC(tb)
	dir := tb.TempDir()
	src := filepath.Join(dir, "cfi.s")
	if err := os.WriteFile(src, []byte(cfiAsm), 0o644); err != nil {
		tb.Fatal(err)
	}
	so := filepath.Join(dir, "cfi.so")
	if out, err := exec.Command("gcc", "-shared", "-nostdlib", "-o", so, src).CombinedOutput(); err != nil {
		tb.Fatalf("gcc: %v\n%s", err, out)
	}
	return so
}

// TestCFIRules checks the caller's registers one step gives at points of
// known rules.
func TestCFIRules(t *testing.T) {
	tab, syms, _ := openTable(t, buildAsm(t))
	const bias = 0x7f0000000000
	find := fileFinder(tab, bias)
	S := uint64(stackBase)
	pc := func(name string) uint64 {
		v, ok := syms[name]
		if !ok {
			t.Fatalf("no symbol %s", name)
		}
		return v + bias
	}
	const ra, rbx, rbp, r11 = 0x401234, 0xb0b0, 0xbeef, 0x401111
	type want struct {
		reg   int
		value uint64
		known bool
	}
	check := func(what string, regs Regs, st Stack, wantCFA uint64, w ...want) {
		t.Helper()
		var scratch row
		var next Regs
		cfa, _, stop := step(find, &regs, &next, false, &st, &scratch)
		if stop != stopNone {
			t.Errorf("%s: stop %v", what, stop)
			return
		}
		if cfa != wantCFA {
			t.Errorf("%s: CFA %#x, want %#x", what, cfa, wantCFA)
		}
		for _, w := range w {
			known := next.Valid&(1<<w.reg) != 0
			if known != w.known || known && next.R[w.reg] != w.value {
				t.Errorf("%s: register %d = %#x (known %v), want %#x (known %v)", what, w.reg, next.R[w.reg], known, w.value, w.known)
			}
		}
	}
	// f1 after push rbx, push rbp, mov rsp,rbp: CFA = rbp+24.
	st := stackOf(S, rbp, rbx, ra, 0)
	check("f1_p1 (def_cfa_register)", regsOf(RIP, pc("f1_p1"), RSP, S, RBP, S, RBX, 1, RAX, 7), st, S+24,
		want{RIP, ra, true}, want{RSP, S + 24, true}, want{RBP, rbp, true}, want{RBX, rbx, true}, want{RAX, 0, false})
	// After pop rbp and DW_CFA_restore rbp: CFA = rsp+16, rbp the same
	// value (no rule in the CIE), rbx still saved.
	st2 := stackOf(S+8, rbx, ra, 0)
	check("f1_p2 (restore)", regsOf(RIP, pc("f1_p2"), RSP, S+8, RBP, 0x1234, RBX, 1), st2, S+24,
		want{RIP, ra, true}, want{RBP, 0x1234, true}, want{RBX, rbx, true})
	// DW_CFA_restore_state: the p1 rules again, CFA rule included (rbp+24,
	// not rsp+16).
	st6 := stackOf(S, 0, rbp, rbx, ra, 0)
	check("f1_p3 (restore_state)", regsOf(RIP, pc("f1_p3"), RSP, S, RBP, S+8, RBX, 1), st6, S+32,
		want{RIP, ra, true}, want{RBP, rbp, true}, want{RBX, rbx, true})
	// f3 after its pop of rbx, the rule "rbx at CFA-16" kept: that slot
	// lies below the sample's stack pointer, outside the copy the kernel
	// makes, and rbx already holds the caller's value (the pop restored
	// it): the unwind goes on with it rather than ending there.
	st7 := stackOf(S, ra, 0)
	check("f3_p1 (a save rule below the stack pointer)", regsOf(RIP, pc("f3_p1"), RSP, S, RBX, rbx), st7, S+8,
		want{RIP, ra, true}, want{RBX, rbx, true}, want{RSP, S + 8, true})
	// f2: RA in r11, rbx = CFA-8, r12 at [rsp+16], r13 = CFA+32, r14
	// undefined, r15 and r10 (caller-saved) same value, r11 (no rule)
	// unknown.
	st3 := stackOf(S, 0, 0, 0x1212, 0)
	check("f2_p1 (register, val_offset, expression, val_expression, undefined, same_value)",
		regsOf(RIP, pc("f2_p1"), RSP, S, R11, r11, RBX, 1, R12, 2, R13, 3, R14, 4, R15, 5, R10, 6), st3, S+8,
		want{RIP, r11, true}, want{RBX, S, true}, want{R12, 0x1212, true}, want{R13, S + 8 + 32, true},
		want{R14, 0, false}, want{R15, 5, true}, want{R10, 6, true}, want{R11, 0, false})

	// The signal frame returns to g's first byte: g's FDE is found with
	// that pc (g-1 has none), then g's return address 0 ends the stack.
	ctx := S + 0x100
	st4 := stackOf(S, make([]uint64, 0x100/8+2)...)
	binary.LittleEndian.PutUint64(st4.Data[16:], ctx)     // the interrupted rsp
	binary.LittleEndian.PutUint64(st4.Data[24:], pc("g")) // the interrupted rip
	binary.LittleEndian.PutUint64(st4.Data[0x100:], 0)    // g's return address
	pcs, stop := Unwind(find, regsOf(RIP, pc("sig_p1"), RSP, S), st4, nil, 8)
	if stop != StopEnd || len(pcs) != 2 || pcs[1] != pc("g") {
		t.Errorf("signal frame: %x (%v), want [sig_p1 g] (end)", pcs, stop)
	}
	// Without the 'S' rule (g-1 looked up), that frame has no FDE and no
	// frame pointer: the test above would end with StopNoInfo.
	var scratch row
	regs := regsOf(RIP, pc("g"), RSP, ctx)
	var next Regs
	if _, _, stop := step(find, &regs, &next, true, &st4, &scratch); stop != StopNoInfo {
		t.Errorf("g-1: stop %v, want %v (no FDE)", stop, StopNoInfo)
	}

	// A loop: fp's saved rbp points to itself and its return address is
	// in fp again: the second CFA equals the first.
	st5 := stackOf(S, S, pc("fp_p1")+1, 0)
	pcs, stop = Unwind(find, regsOf(RIP, pc("fp_p1"), RSP, S, RBP, S), st5, nil, 8)
	if stop != StopBad || len(pcs) != 2 {
		t.Errorf("loop: %x (%v), want 2 pcs (bad)", pcs, stop)
	}
}

// TestStops checks StopDepth, StopStack and StopNoInfo on a live sample.
func TestStops(t *testing.T) {
	s := liveSample(t, true, "direct")
	full, stop := Unwind(s.find, s.regs, s.st, nil, 64)
	if stop != StopEnd || len(full) < 5 {
		t.Fatalf("full unwind: %d pcs (%v)", len(full), stop)
	}
	for max := 1; max < len(full); max++ {
		pcs, stop := Unwind(s.find, s.regs, s.st, []uint64{42}, max)
		if stop != StopDepth || len(pcs) != 1+max || pcs[0] != 42 || pcs[max] != full[max-1] {
			t.Errorf("max %d: %x (%v), want %d pcs after 42 (depth)", max, pcs, stop, max)
		}
	}
	if pcs, stop := Unwind(s.find, s.regs, s.st, nil, len(full)); stop != StopEnd || len(pcs) != len(full) {
		t.Errorf("max %d: %d pcs (%v), want all (end)", len(full), len(pcs), stop)
	}
	// A stack copy cut after the first frames: the unwind ends there.
	for cut := 0; cut < 64; cut += 8 {
		st := Stack{Addr: s.st.Addr, Data: s.st.Data[:cut]}
		pcs, stop := Unwind(s.find, s.regs, st, nil, 64)
		if stop != StopStack || len(pcs) >= len(full) {
			t.Errorf("stack cut at %d bytes: %d pcs (%v), want fewer than %d (stack)", cut, len(pcs), stop, len(full))
		}
	}
	// No Finder knowledge and no frame pointer.
	none := func(uint64) (*Table, uint64, bool) { return nil, 0, false }
	regs := s.regs
	regs.Valid &^= 1 << RBP
	if pcs, stop := Unwind(none, regs, s.st, nil, 64); stop != StopNoInfo || len(pcs) != 1 {
		t.Errorf("no CFI, no RBP: %d pcs (%v), want 1 (no-info)", len(pcs), stop)
	}
}
