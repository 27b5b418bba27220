// Package unwind unwinds user-space x86-64 stacks with DWARF call-frame
// information: one sample's registers and a copy of its stack bytes
// (perf's PERF_SAMPLE_REGS_USER and PERF_SAMPLE_STACK_USER) and the
// .eh_frame of the ELF files mapped in the process give the sample's
// return addresses.
//
// The files are the profiled processes' and may be crafted: Load bounds
// what it reads and gives an error on a malformed file; Unwind checks
// every read against the stack copy, requires the CFA to grow from frame
// to frame, bounds expressions, and stops after max frames.
//
// CIEs and FDEs are read by package cfi (augmentations, pointer
// encodings, bounds); their CFA programs are run by this package, once
// per FDE into a table of rows kept by the Table. A lookup on a
// warm cache is two binary searches and allocates nothing.
package unwind

import "math/bits"

// DWARF x86-64 register numbers.
const (
	RAX     = 0
	RDX     = 1
	RCX     = 2
	RBX     = 3
	RSI     = 4
	RDI     = 5
	RBP     = 6
	RSP     = 7
	R8      = 8
	R9      = 9
	R10     = 10
	R11     = 11
	R12     = 12
	R13     = 13
	R14     = 14
	R15     = 15
	RIP     = 16 // the return address column
	NumRegs = 17
)

// calleeSaved has the bits of the registers a call preserves (SysV ABI):
// without a rule for them, a caller's value is the callee's.
const calleeSaved = 1<<RBX | 1<<RBP | 1<<R12 | 1<<R13 | 1<<R14 | 1<<R15

// Regs is a register set in DWARF numbering; Valid has bit i set when R[i]
// is known.
type Regs struct {
	R     [NumRegs]uint64
	Valid uint32
}

// Stack is a copy of user stack memory: Data holds the bytes at addresses
// Addr.. (Addr is the sample's SP).
type Stack struct {
	Addr uint64
	Data []byte
}

// Finder returns the table of the file mapped at pc, and pc's offset in
// that file (pc - mapping start + mapping's file offset); ok false when pc
// is in no known file mapping.
type Finder func(pc uint64) (t *Table, fileOff uint64, ok bool)

// Stop says why an unwind ended.
type Stop int

const (
	// StopEnd: the outermost frame (return address undefined, as in
	// _start and clone, or 0).
	StopEnd Stop = iota
	// StopNoInfo: a pc with neither CFI nor a usable frame pointer, or
	// CFI that needs a register whose value is not known.
	StopNoInfo
	// StopStack: the next read falls outside the copied stack bytes: the
	// stack is cut (truncated).
	StopStack
	// StopDepth: max frames reached (truncated).
	StopDepth
	// StopBad: inconsistent: the CFA not above the previous one (a loop),
	// a malformed CFA program, a bad expression.
	StopBad

	stopNone Stop = -1 // internal: go on
)

var stopNames = [...]string{"end", "no-info", "stack", "depth", "bad"}

// String names the stop.
func (s Stop) String() string {
	if s >= 0 && int(s) < len(stopNames) {
		return stopNames[s]
	}
	return "stop?"
}

// Unwind appends to out the sample's PC (regs.R[RIP]) and then each
// caller's return address (as read from the stack, not minus 1), at most
// max entries, and says why it stopped. It allocates nothing on a warm
// cache (reuse out).
//
// Each frame's FDE is looked up with its pc, minus 1 for a return address
// (a call may end a function) except in the frame a signal frame returns
// to: that pc is where the signal interrupted the thread (FDEs whose CIE has
// the 'S' augmentation, such as glibc's __restore_rt, are signal frames, as
// in libgcc; nothing else about them is special, their CFI restores every
// register from the signal context). The entry appended for that frame is
// the interrupted pc itself. In the caller, registers without a rule keep
// their value when callee-saved (RBX, RBP, R12-R15) and are unknown
// otherwise; RSP is the CFA. A save slot below the stack copy (in an
// epilogue whose CFI still has the rule after the pop) leaves the register
// as it is (see popped).
//
// A pc without CFI (no file, no FDE: a Go binary, JIT code) takes one
// frame-pointer step when RBP is known, at or above SP and its two words
// are in the stack copy: the return address at RBP+8, the caller's RBP at
// RBP, its SP RBP+16; only those three registers are known in the caller.
func Unwind(find Finder, regs Regs, st Stack, out []uint64, max int) ([]uint64, Stop) {
	if max <= 0 {
		return out, StopDepth
	}
	if regs.Valid&(1<<RIP) == 0 {
		return out, StopNoInfo
	}
	out = append(out, regs.R[RIP])
	var scratch row
	var buf [2]Regs
	cur, next := &regs, &buf[0]
	adjust := false
	// The CFA of each frame must be above the previous frame's (and the
	// first above SP).
	low, haveLow := regs.R[RSP], regs.Valid&(1<<RSP) != 0
	for n := 1; ; n++ {
		cfa, sig, stop := step(find, cur, next, adjust, &st, &scratch)
		if stop != stopNone {
			return out, stop
		}
		if haveLow && cfa <= low {
			return out, StopBad
		}
		low, haveLow = cfa, true
		if next.R[RIP] == 0 {
			return out, StopEnd
		}
		if n == max {
			return out, StopDepth
		}
		out = append(out, next.R[RIP])
		adjust = !sig
		if cur == &regs {
			cur, next = next, &buf[1]
		} else {
			cur, next = next, cur
		}
	}
}

// step unwinds one frame from cur: the caller's registers in next (RIP
// the return address, valid unless stop), the frame's CFA, and whether
// the frame is a signal frame.
func step(find Finder, cur, next *Regs, adjust bool, st *Stack, scratch *row) (cfa uint64, sig bool, stop Stop) {
	pc := cur.R[RIP]
	if adjust {
		pc--
	}
	if t, off, ok := find(pc); ok && t != nil {
		if v, ok := t.vaddr(off); ok {
			if f := t.find(v); f != nil {
				r, ok := t.rowAt(f, v, scratch)
				if !ok {
					return 0, false, StopBad
				}
				cfa, stop = apply(r, f, cur, next, st)
				return cfa, f.cie.signal, stop
			}
		}
	}
	// No CFI: one frame-pointer step.
	if cur.Valid&(1<<RBP) == 0 {
		return 0, false, StopNoInfo
	}
	fp := cur.R[RBP]
	if cur.Valid&(1<<RSP) != 0 && fp < cur.R[RSP] {
		return 0, false, StopNoInfo
	}
	ra, ok1 := st.read(fp + 8)
	caller, ok2 := st.read(fp)
	if !ok1 || !ok2 || fp+16 < fp {
		return 0, false, StopNoInfo
	}
	next.R[RIP], next.R[RBP], next.R[RSP] = ra, caller, fp+16
	next.Valid = 1<<RIP | 1<<RBP | 1<<RSP
	return fp + 16, false, stopNone
}

// apply computes the CFA and the caller's registers (in next) from the
// row r of f.
func apply(r *row, f *fde, cur, next *Regs, st *Stack) (cfa uint64, stop Stop) {
	switch r.cfa.kind {
	case kReg:
		if cur.Valid&(1<<r.cfa.reg) == 0 {
			return 0, StopNoInfo
		}
		cfa = cur.R[r.cfa.reg] + uint64(int64(r.cfa.off))
	case kExpr, kExpr | fromCIE:
		if cfa, stop = eval(expr(r.cfa, f), cur, st, false, 0); stop != stopNone {
			return 0, stop
		}
	default: // no CFA rule, or one this table cannot hold
		return 0, StopBad
	}
	if r.set&(1<<RIP) == 0 {
		return 0, StopBad // no return address rule
	}
	// Registers without a rule: callee-saved ones keep their value, the
	// others are unknown; RSP is the CFA.
	next.R = cur.R
	next.R[RSP] = cfa
	next.Valid = cur.Valid&calleeSaved | 1<<RSP
	for m := r.set; m != 0; m &= m - 1 {
		i := bits.TrailingZeros32(m)
		ru := &r.r[i]
		var v uint64
		switch ru.kind {
		case kSame:
			next.Valid = next.Valid&^(1<<i) | cur.Valid&(1<<i)
			continue
		case kOffset:
			a := cfa + uint64(int64(ru.off))
			var ok bool
			if v, ok = st.read(a); !ok {
				if popped(i, a, st) {
					next.Valid = next.Valid&^(1<<i) | cur.Valid&(1<<i)
					continue
				}
				return 0, StopStack
			}
		case kValOffset:
			v = cfa + uint64(int64(ru.off))
		case kReg:
			if cur.Valid&(1<<ru.reg) == 0 {
				next.Valid &^= 1 << i
				continue
			}
			v = cur.R[ru.reg]
		case kExpr, kExpr | fromCIE, kValExpr, kValExpr | fromCIE:
			if v, stop = eval(expr(*ru, f), cur, st, true, cfa); stop != stopNone {
				return 0, stop
			}
			if ru.kind&^fromCIE == kExpr {
				a := v
				var ok bool
				if v, ok = st.read(a); !ok {
					if popped(i, a, st) {
						next.Valid = next.Valid&^(1<<i) | cur.Valid&(1<<i)
						continue
					}
					return 0, StopStack
				}
			}
		case kUndef:
			if i == RIP {
				return 0, StopEnd
			}
			next.Valid &^= 1 << i
			continue
		default: // kBad
			if i == RIP {
				return 0, StopBad
			}
			next.Valid &^= 1 << i
			continue
		}
		next.R[i] = v
		next.Valid |= 1 << i
	}
	return cfa, stopNone
}

// popped says whether register i's save slot at a lies below the stack
// copy, that is below the sample's stack pointer: only the innermost frame
// can have one there, in an epilogue whose CFI keeps a save rule after the
// pop that restored the register (glibc's msort_with_tmp: "pop %rbx" with
// rbx still "at CFA-56"). The register holds the caller's value then, and
// the kernel copies nothing below the stack pointer. Not the return
// address: a ret pops it last.
func popped(i int, a uint64, st *Stack) bool {
	return i != RIP && a < st.Addr
}

// expr returns the bytes of the expression of the rule r of f.
func expr(r rule, f *fde) []byte {
	p := f.ins
	if r.kind&fromCIE != 0 {
		p = f.cie.init
	}
	return p[r.off : int(r.off)+int(r.n)]
}
