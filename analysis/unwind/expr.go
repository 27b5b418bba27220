package unwind

import "encoding/binary"

// Bounds of a DWARF expression's evaluation.
const (
	maxOps   = 64 // operations executed
	maxDepth = 64 // stack entries
)

// eval evaluates the DWARF expression e with the registers r and the stack
// copy st; push says to push the CFA first (register rules). Operations
// beyond those CFI uses in practice (no branches, no calls) give StopBad; a
// register the expression needs and does not know gives StopNoInfo; a read
// outside the stack copy gives StopStack.
func eval(e []byte, r *Regs, st *Stack, push bool, cfa uint64) (uint64, Stop) {
	var s [maxDepth]uint64
	n := 0
	if push {
		s[0], n = cfa, 1
	}
	pos := 0
	for ops := 0; pos < len(e); ops++ {
		if ops == maxOps {
			return 0, StopBad
		}
		op := e[pos]
		pos++
		// Operands.
		var v uint64 // the value an operation pushes
		switch {
		case op >= 0x30 && op <= 0x4f: // DW_OP_lit0..31
			v = uint64(op - 0x30)
		case op >= 0x70 && op <= 0x8f, op == 0x92: // DW_OP_breg0..31, DW_OP_bregx
			reg := uint64(op - 0x70)
			if op == 0x92 {
				var l int
				if reg, l = uleb(e[pos:]); l == 0 {
					return 0, StopBad
				}
				pos += l
			}
			off, l := sleb(e[pos:])
			if l == 0 || reg >= NumRegs {
				return 0, StopBad
			}
			pos += l
			if r.Valid&(1<<reg) == 0 {
				return 0, StopNoInfo
			}
			v = r.R[reg] + uint64(off)
		case op >= 0x08 && op <= 0x0f: // DW_OP_const1u .. DW_OP_const8s
			size := 1 << ((op - 0x08) >> 1)
			if len(e)-pos < size {
				return 0, StopBad
			}
			var u uint64
			for i := size - 1; i >= 0; i-- {
				u = u<<8 | uint64(e[pos+i])
			}
			pos += size
			if op&1 != 0 && size < 8 { // signed: extend
				shift := 64 - 8*uint(size)
				u = uint64(int64(u<<shift) >> shift)
			}
			v = u
		case op == 0x10, op == 0x23: // DW_OP_constu, DW_OP_plus_uconst
			u, l := uleb(e[pos:])
			if l == 0 {
				return 0, StopBad
			}
			pos += l
			v = u
		case op == 0x11: // DW_OP_consts
			i, l := sleb(e[pos:])
			if l == 0 {
				return 0, StopBad
			}
			pos += l
			v = uint64(i)
		case op == 0x15: // DW_OP_pick
			if pos >= len(e) {
				return 0, StopBad
			}
			i := int(e[pos])
			pos++
			if i >= n {
				return 0, StopBad
			}
			v = s[n-1-i]
		}
		// Stack effects.
		switch {
		case op >= 0x30 && op <= 0x4f, op >= 0x70 && op <= 0x8f, op == 0x92,
			op >= 0x08 && op <= 0x11, op == 0x15:
			if n == maxDepth {
				return 0, StopBad
			}
			s[n] = v
			n++
		case op == 0x12 || op == 0x14: // DW_OP_dup, DW_OP_over
			k := 1
			if op == 0x14 {
				k = 2
			}
			if n < k || n == maxDepth {
				return 0, StopBad
			}
			s[n] = s[n-k]
			n++
		case op == 0x13: // DW_OP_drop
			if n < 1 {
				return 0, StopBad
			}
			n--
		case op == 0x16: // DW_OP_swap
			if n < 2 {
				return 0, StopBad
			}
			s[n-1], s[n-2] = s[n-2], s[n-1]
		case op == 0x06: // DW_OP_deref
			if n < 1 {
				return 0, StopBad
			}
			u, ok := st.read(s[n-1])
			if !ok {
				return 0, StopStack
			}
			s[n-1] = u
		case op == 0x23: // DW_OP_plus_uconst
			if n < 1 {
				return 0, StopBad
			}
			s[n-1] += v
		case op == 0x1f || op == 0x20: // DW_OP_neg, DW_OP_not
			if n < 1 {
				return 0, StopBad
			}
			if op == 0x1f {
				s[n-1] = -s[n-1]
			} else {
				s[n-1] = ^s[n-1]
			}
		case op == 0x1a, op == 0x1c, op == 0x1e, op == 0x21, op == 0x22, op == 0x24,
			op == 0x25, op == 0x26, op == 0x27, op >= 0x29 && op <= 0x2e:
			if n < 2 {
				return 0, StopBad
			}
			b, a := s[n-1], s[n-2] // a op b
			n--
			s[n-1] = binop(op, a, b)
		case op == 0x96: // DW_OP_nop
		default:
			return 0, StopBad
		}
	}
	if n == 0 {
		return 0, StopBad
	}
	return s[n-1], stopNone
}

// binop applies the binary operation op to a (second entry) and b (top).
func binop(op byte, a, b uint64) uint64 {
	t := func(c bool) uint64 {
		if c {
			return 1
		}
		return 0
	}
	switch op {
	case 0x1a: // DW_OP_and
		return a & b
	case 0x1c: // DW_OP_minus
		return a - b
	case 0x1e: // DW_OP_mul
		return a * b
	case 0x21: // DW_OP_or
		return a | b
	case 0x22: // DW_OP_plus
		return a + b
	case 0x24: // DW_OP_shl
		return a << b
	case 0x25: // DW_OP_shr
		return a >> b
	case 0x26: // DW_OP_shra
		return uint64(int64(a) >> b)
	case 0x27: // DW_OP_xor
		return a ^ b
	case 0x29: // DW_OP_eq
		return t(a == b)
	case 0x2a: // DW_OP_ge (signed, as all DWARF comparisons)
		return t(int64(a) >= int64(b))
	case 0x2b: // DW_OP_gt
		return t(int64(a) > int64(b))
	case 0x2c: // DW_OP_le
		return t(int64(a) <= int64(b))
	case 0x2d: // DW_OP_lt
		return t(int64(a) < int64(b))
	default: // 0x2e DW_OP_ne
		return t(a != b)
	}
}

// read reads the 8 bytes at address a of the stack copy.
func (st *Stack) read(a uint64) (uint64, bool) {
	o := a - st.Addr
	if a < st.Addr || o >= uint64(len(st.Data)) || uint64(len(st.Data))-o < 8 {
		return 0, false
	}
	return binary.LittleEndian.Uint64(st.Data[o:]), true
}
