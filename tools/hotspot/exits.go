package main

import (
	"fmt"
	"os"
	"runtime"

	"golang.org/x/arch/x86/x86asm"
)

// A call's end is measured with uprobes on the function's exits — its
// return instructions and its jumps out of it (tail calls) — never with a
// uretprobe. A uretprobe replaces the return address on the stack with
// the kernel's trampoline until the function returns: a runtime that
// walks or copies its stacks (Go's: stack growth, tracebacks, the
// collector) finds an address it does not know and dies, and the kernel
// itself loses the return when the function's callee runs on another
// stack (a signal handler on sigaltstack entering a probed function above
// the interrupted one: the kernel drops the pending return and the
// program gets SIGILL). A uprobe on an instruction changes no data of the
// program.

// maxFuncBytes bounds the code read to find a function's exits.
const maxFuncBytes = 1 << 20

// exitPlan is where a function's calls end: the file offsets of its
// probed exits, and what could not be probed.
type exitPlan struct {
	Offs []uint64
	// Unprobed counts the exits not probed: indirect jumps (a jump table
	// inside, or a tail call through a pointer: the target is not known
	// before the jump) and conditional jumps out of the function (a probe
	// there would fire when the jump is not taken too).
	Unprobed int
	// Why, if not "", says why no exit is probed: the calls' entries are
	// counted (callers, calls), their durations are not measured.
	Why string
}

// findExits decodes the function at file offset off of path, size bytes,
// and returns its exits.
func findExits(path string, off, size uint64) exitPlan {
	if runtime.GOARCH != "amd64" {
		return exitPlan{Why: "exits are found for x86-64 code only"}
	}
	if size == 0 {
		return exitPlan{Why: "the function's size is not known (no symbol size or .eh_frame range)"}
	}
	if size > maxFuncBytes {
		return exitPlan{Why: fmt.Sprintf("the function is %d bytes long (at most %d are decoded)", size, maxFuncBytes)}
	}
	f, err := os.Open(path)
	if err != nil {
		return exitPlan{Why: "read the code: " + err.Error()}
	}
	defer f.Close()
	code := make([]byte, size)
	if n, err := f.ReadAt(code, int64(off)); uint64(n) != size {
		return exitPlan{Why: fmt.Sprintf("read the code: %d of %d bytes: %v", n, size, err)}
	}
	return exitsOf(code, off)
}

// exitsOf finds the exits of the function code, which starts at file
// offset base, by a linear sweep (compilers put no data in a function's
// symbol range on x86-64; padding after the last instruction is int3 or
// nops).
func exitsOf(code []byte, base uint64) exitPlan {
	var p exitPlan
	for pc := 0; pc < len(code); {
		n, in, ok := insnAt(code[pc:])
		if !ok {
			return exitPlan{Why: fmt.Sprintf("instruction at +%#x not decoded (% x)", pc, code[pc:min(pc+8, len(code))])}
		}
		switch in.Op {
		case x86asm.RET, x86asm.LRET:
			p.Offs = append(p.Offs, base+uint64(pc))
		case x86asm.JMP:
			if rel, ok := in.Args[0].(x86asm.Rel); ok {
				if t := pc + n + int(rel); t < 0 || t >= len(code) {
					p.Offs = append(p.Offs, base+uint64(pc)) // a tail jump
				}
			} else {
				p.Unprobed++ // indirect: a jump table or a tail call
			}
		case x86asm.JA, x86asm.JAE, x86asm.JB, x86asm.JBE, x86asm.JE, x86asm.JG, x86asm.JGE, x86asm.JL,
			x86asm.JLE, x86asm.JNE, x86asm.JNO, x86asm.JNP, x86asm.JNS, x86asm.JO, x86asm.JP, x86asm.JS:
			if rel, ok := in.Args[0].(x86asm.Rel); ok {
				if t := pc + n + int(rel); t < 0 || t >= len(code) {
					p.Unprobed++ // a conditional tail jump
				}
			}
		}
		pc += n
	}
	if len(p.Offs) == 0 {
		p.Why = "no return instruction or jump out of the function found"
	}
	return p
}

// insnAt decodes the instruction at the start of code: its length and
// x86asm's decoding (Op 0 for what x86asm does not know but whose length
// is known: endbr64, VEX and EVEX encodings, none of which moves control).
func insnAt(code []byte) (int, x86asm.Inst, bool) {
	if len(code) >= 4 && code[0] == 0xf3 && code[1] == 0x0f && code[2] == 0x1e && (code[3] == 0xfa || code[3] == 0xfb) {
		return 4, x86asm.Inst{}, true // endbr64 / endbr32
	}
	in, err := x86asm.Decode(code, 64)
	if err == nil && in.Len > 0 {
		switch in.Op {
		case x86asm.VZEROUPPER, x86asm.VZEROALL:
			// x86asm reads a ModRM after them: C5 xx 77, C4 xx xx 77.
			if code[0] == 0xc4 {
				return 4, x86asm.Inst{}, true
			}
			return 3, x86asm.Inst{}, true
		}
		return in.Len, in, true
	}
	if n, ok := vexLen(code); ok {
		return n, x86asm.Inst{}, true
	}
	return 0, x86asm.Inst{}, false
}

// vexLen is the length of a VEX (C4, C5) or EVEX (62) encoded instruction
// at the start of code (after legacy prefixes 66, F2, F3, 67): the AVX
// instructions x86asm does not decode. ok false if code is not one.
func vexLen(code []byte) (int, bool) {
	i := 0
	for i < len(code) && i < 4 && (code[i] == 0x66 || code[i] == 0xf2 || code[i] == 0xf3 || code[i] == 0x67) {
		i++
	}
	addr32 := false
	for _, b := range code[:i] {
		addr32 = addr32 || b == 0x67
	}
	if i+2 >= len(code) {
		return 0, false
	}
	var opMap int
	switch code[i] {
	case 0xc5: // 2-byte VEX: map 0F
		opMap = 1
		i += 2
	case 0xc4: // 3-byte VEX
		opMap = int(code[i+1] & 0x1f)
		i += 3
	case 0x62: // EVEX: 4 bytes
		if i+4 >= len(code) {
			return 0, false
		}
		opMap = int(code[i+1] & 0x07)
		i += 4
	default:
		return 0, false
	}
	if opMap < 1 || opMap > 3 || i+1 >= len(code) {
		return 0, false
	}
	op := code[i]
	i++
	modrm := code[i]
	i++
	mod, rm := modrm>>6, modrm&7
	if mod != 3 {
		if rm == 4 && !addr32 { // SIB
			if i >= len(code) {
				return 0, false
			}
			if mod == 0 && code[i]&7 == 5 {
				i += 4 // disp32 with no base
			}
			i++
		}
		switch {
		case mod == 0 && rm == 5:
			i += 4 // rip-relative
		case mod == 1:
			i++
		case mod == 2:
			i += 4
		}
	}
	// An imm8: every instruction of map 0F3A, and a few of map 0F.
	if opMap == 3 || (opMap == 1 && (op == 0x70 || op == 0x71 || op == 0x72 || op == 0x73 || op == 0xc2 || op == 0xc4 || op == 0xc5 || op == 0xc6)) {
		i++
	}
	if i > len(code) || i > 15 {
		return 0, false
	}
	return i, true
}
