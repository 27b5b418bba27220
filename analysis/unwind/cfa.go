package unwind

import (
	"errors"
	"math"
	"math/bits"
	"unsafe"
)

// This file runs CFA programs (DWARF 5 §6.4.2) into rows of rules. A
// DW_CFA_restore gives a register its rule after the CIE's initial
// instructions; a malformed program (DW_CFA_restore_state on an empty
// stack, a block past the program's end) gives a bad row, never a panic;
// DW_CFA_remember_state keeps a fixed stack of at most 16 rows.

// Rule kinds of a register (and of the CFA: kReg or kExpr).
const (
	kUnset     uint8 = iota // no rule: a callee-saved register keeps its value, others are unknown; RSP is the CFA
	kUndef                  // DW_CFA_undefined: unknown (RIP: the outermost frame)
	kSame                   // same value
	kOffset                 // saved at CFA+off
	kValOffset              // the value is CFA+off
	kReg                    // the value is in register reg (CFA: reg+off)
	kExpr                   // saved at the address the expression gives, CFA pushed first (CFA: the value of the expression)
	kValExpr                // the value of the expression, CFA pushed first
	kBad                    // a rule this table cannot hold (an offset beyond 32 bits, a register beyond RIP)

	fromCIE = 0x80 // kind flag of kExpr and kValExpr: the expression is in the CIE's instructions, not the FDE's
)

// rule is one column of a row.
type rule struct {
	kind uint8
	reg  uint8  // kReg
	n    uint16 // expression length
	off  int32  // offset, or the expression's position in its program
}

// row is the rules in effect over a range of code.
type row struct {
	cfa rule
	r   [NumRegs]rule
	set uint32 // bit i: r[i] is not kUnset
}

// mark sets r.set.
func (r *row) mark() {
	r.set = 0
	for i := range r.r {
		if r.r[i].kind != kUnset {
			r.set |= 1 << i
		}
	}
}

const rowBytes = int64(unsafe.Sizeof(row{})) + 8 // a row and its location

// rowSet is an FDE's table: rows[i] is in effect from locs[i] to the next
// location (the last to the FDE's end).
type rowSet struct {
	locs []uint64
	rows []row
	bad  bool // the program is malformed
}

// badRows marks an FDE whose program is malformed.
var badRows = &rowSet{bad: true}

// Bounds of a CFA program's state.
const (
	maxRemember = 16  // DW_CFA_remember_state depth
	maxExprLen  = 512 // bytes of one DWARF expression
)

// interp is the state of a CFA program being run.
type interp struct {
	prog  []byte
	pos   int
	cie   bool // prog is the CIE's initial instructions
	caf   uint64
	daf   int64
	cur   row
	init  row // after the CIE's instructions (DW_CFA_restore)
	stack [maxRemember]row
	depth int
}

// errCFI is the error of a malformed CFA program: static, a lookup on a
// full cache runs the program each time and must not allocate.
var errCFI = errors.New("malformed CFA program")

// Modes of interp.run.
const (
	modeAt    = iota // stop with the row in effect at v in cur
	modeCount        // count the rows
	modeFill         // fill rs (sized by modeCount)
)

// run runs f's CIE and FDE programs; see the modes. It returns the number of
// rows (modeCount, modeFill). Bounded by the programs' length (each
// instruction takes at least one byte; an advance gives at most one row).
func (m *interp) run(f *fde, mode int, v uint64, rs *rowSet) (int, error) {
	c := f.cie
	m.prog, m.pos, m.cie, m.caf, m.daf, m.depth = c.init, 0, true, c.caf, c.daf, 0
	m.cur = row{}
	if _, more, err := m.next(); err != nil {
		return 0, err
	} else if more {
		return 0, errCFI // a location advance in a CIE
	}
	m.init = m.cur
	m.prog, m.pos, m.cie = f.ins, 0, false
	loc, n := f.lo, 0
	for {
		adv, more, err := m.next()
		if err != nil {
			return 0, err
		}
		next := loc + adv
		end := !more || next < loc || next >= f.hi
		if !end && adv == 0 {
			continue
		}
		// The row [loc, next) is complete.
		switch mode {
		case modeAt:
			if end || v < next {
				m.cur.mark()
				return 0, nil
			}
		case modeFill:
			if n == len(rs.rows) {
				return 0, errCFI // cannot happen: more rows on the second run
			}
			rs.locs[n], rs.rows[n] = loc, m.cur
			rs.rows[n].mark()
		}
		n++
		if end {
			return n, nil
		}
		loc = next
	}
}

// next runs instructions up to the next advance of the location, whose
// size in bytes it returns; more is false at the end of the program.
func (m *interp) next() (adv uint64, more bool, err error) {
	for m.pos < len(m.prog) {
		op := m.prog[m.pos]
		m.pos++
		switch op >> 6 {
		case 1: // DW_CFA_advance_loc
			return m.advance(uint64(op & 0x3f))
		case 2: // DW_CFA_offset
			off, ok := m.uleb()
			if !ok {
				return 0, false, errCFI
			}
			m.setOff(uint64(op&0x3f), kOffset, off, true)
			continue
		case 3: // DW_CFA_restore
			m.restore(uint64(op & 0x3f))
			continue
		}
		switch op {
		case 0x00: // DW_CFA_nop
		case 0x02, 0x03, 0x04: // DW_CFA_advance_loc1, 2, 4
			size := 1 << (op - 2)
			if len(m.prog)-m.pos < size {
				return 0, false, errCFI
			}
			var d uint64
			for i := size - 1; i >= 0; i-- {
				d = d<<8 | uint64(m.prog[m.pos+i])
			}
			m.pos += size
			return m.advance(d)
		case 0x05, 0x14, 0x2f: // DW_CFA_offset_extended, DW_CFA_val_offset, DW_CFA_GNU_negative_offset_extended
			reg, ok1 := m.uleb()
			off, ok2 := m.uleb()
			if !ok1 || !ok2 {
				return 0, false, errCFI
			}
			switch op {
			case 0x05:
				m.setOff(reg, kOffset, off, true)
			case 0x14:
				m.setOff(reg, kValOffset, off, true)
			default:
				m.setOff(reg, kOffset, off, false)
			}
		case 0x11, 0x15: // DW_CFA_offset_extended_sf, DW_CFA_val_offset_sf
			reg, ok1 := m.uleb()
			off, ok2 := m.sleb()
			if !ok1 || !ok2 {
				return 0, false, errCFI
			}
			k := kOffset
			if op == 0x15 {
				k = kValOffset
			}
			m.set(reg, m.factored(k, off))
		case 0x06: // DW_CFA_restore_extended
			reg, ok := m.uleb()
			if !ok {
				return 0, false, errCFI
			}
			m.restore(reg)
		case 0x07, 0x08: // DW_CFA_undefined, DW_CFA_same_value
			reg, ok := m.uleb()
			if !ok {
				return 0, false, errCFI
			}
			k := kUndef
			if op == 0x08 {
				k = kSame
			}
			m.set(reg, rule{kind: k})
		case 0x09: // DW_CFA_register
			reg, ok1 := m.uleb()
			src, ok2 := m.uleb()
			if !ok1 || !ok2 {
				return 0, false, errCFI
			}
			r := rule{kind: kReg, reg: uint8(src)}
			if src >= NumRegs {
				r = rule{kind: kBad}
			}
			m.set(reg, r)
		case 0x0a: // DW_CFA_remember_state
			if m.depth == maxRemember {
				return 0, false, errCFI
			}
			m.stack[m.depth] = m.cur
			m.depth++
		case 0x0b: // DW_CFA_restore_state: the CFA rule too, as libgcc does
			if m.depth == 0 {
				return 0, false, errCFI // no DW_CFA_remember_state before
			}
			m.depth--
			m.cur = m.stack[m.depth]
		case 0x0c, 0x12: // DW_CFA_def_cfa, DW_CFA_def_cfa_sf
			reg, ok1 := m.uleb()
			if !ok1 {
				return 0, false, errCFI
			}
			r, ok := m.cfaOffset(op == 0x12)
			if !ok {
				return 0, false, errCFI
			}
			if reg >= NumRegs {
				r.kind = kBad
			}
			r.reg = uint8(reg)
			m.cur.cfa = r
		case 0x0d: // DW_CFA_def_cfa_register
			reg, ok := m.uleb()
			if !ok {
				return 0, false, errCFI
			}
			if m.cur.cfa.kind != kReg || reg >= NumRegs {
				m.cur.cfa = rule{kind: kBad}
			} else {
				m.cur.cfa.reg = uint8(reg)
			}
		case 0x0e, 0x13: // DW_CFA_def_cfa_offset, DW_CFA_def_cfa_offset_sf
			r, ok := m.cfaOffset(op == 0x13)
			if !ok {
				return 0, false, errCFI
			}
			if m.cur.cfa.kind != kReg || r.kind != kReg {
				m.cur.cfa = rule{kind: kBad}
			} else {
				m.cur.cfa.off = r.off
			}
		case 0x0f: // DW_CFA_def_cfa_expression
			r, ok := m.block(kExpr)
			if !ok {
				return 0, false, errCFI
			}
			m.cur.cfa = r
		case 0x10, 0x16: // DW_CFA_expression, DW_CFA_val_expression
			reg, ok := m.uleb()
			if !ok {
				return 0, false, errCFI
			}
			k := kExpr
			if op == 0x16 {
				k = kValExpr
			}
			r, ok := m.block(k)
			if !ok {
				return 0, false, errCFI
			}
			m.set(reg, r)
		case 0x2e: // DW_CFA_GNU_args_size
			if _, ok := m.uleb(); !ok {
				return 0, false, errCFI
			}
		default: // DW_CFA_set_loc (never emitted by GCC or LLVM), vendor extensions
			return 0, false, errCFI
		}
	}
	return 0, false, nil
}

// advance returns d code alignment units in bytes.
func (m *interp) advance(d uint64) (uint64, bool, error) {
	hi, lo := bits.Mul64(d, m.caf)
	if hi != 0 {
		return 0, false, errCFI
	}
	return lo, true, nil
}

// set sets register reg's rule (registers beyond RIP are not tracked).
// cfaOffset reads the offset operand of a def_cfa / def_cfa_offset
// instruction: unsigned and unfactored, or (the _sf forms) signed and
// factored by the data alignment.
func (m *interp) cfaOffset(signed bool) (rule, bool) {
	if !signed {
		off, ok := m.uleb()
		return offRule(kReg, off), ok
	}
	off, ok := m.sleb()
	return m.factored(kReg, off), ok
}

func (m *interp) set(reg uint64, r rule) {
	if reg < NumRegs {
		m.cur.r[reg] = r
	}
}

// restore gives reg its rule after the CIE's instructions.
func (m *interp) restore(reg uint64) {
	if reg < NumRegs {
		m.cur.r[reg] = m.init.r[reg]
	}
}

// setOff sets a rule of kind k with an unsigned offset: factored by the
// data alignment factor, negated when neg is false
// (DW_CFA_GNU_negative_offset_extended).
func (m *interp) setOff(reg uint64, k uint8, off uint64, pos bool) {
	if off > math.MaxInt32 {
		m.set(reg, rule{kind: kBad})
		return
	}
	v := int64(off)
	if !pos {
		v = -v
	}
	m.set(reg, m.factored(k, v))
}

// factored is a rule of kind k with the offset v times the data alignment
// factor; kBad when it does not fit 32 bits.
func (m *interp) factored(k uint8, v int64) rule {
	if v < math.MinInt32 || v > math.MaxInt32 || m.daf < math.MinInt32 || m.daf > math.MaxInt32 {
		return rule{kind: kBad}
	}
	p := v * m.daf
	if p < math.MinInt32 || p > math.MaxInt32 {
		return rule{kind: kBad}
	}
	return rule{kind: k, off: int32(p)}
}

// offRule is a rule of kind k with the unfactored offset off.
func offRule(k uint8, off uint64) rule {
	if off > math.MaxInt32 {
		return rule{kind: kBad}
	}
	return rule{kind: k, off: int32(off)}
}

// block reads a DWARF expression (ULEB128 length, bytes) as a rule of kind k.
func (m *interp) block(k uint8) (rule, bool) {
	l, ok := m.uleb()
	if !ok || l > uint64(len(m.prog)-m.pos) {
		return rule{}, false
	}
	r := rule{kind: k, n: uint16(l), off: int32(m.pos)}
	if l > maxExprLen || m.pos > math.MaxInt32 {
		r = rule{kind: kBad}
	} else if m.cie {
		r.kind |= fromCIE
	}
	m.pos += int(l)
	return r, true
}

// uleb reads an unsigned LEB128 number (at most 10 bytes).
func (m *interp) uleb() (uint64, bool) {
	v, n := uleb(m.prog[m.pos:])
	m.pos += n
	return v, n > 0
}

// sleb reads a signed LEB128 number.
func (m *interp) sleb() (int64, bool) {
	v, n := sleb(m.prog[m.pos:])
	m.pos += n
	return v, n > 0
}

// uleb decodes an unsigned LEB128 number from b: the value and its length,
// 0 when b ends first or the number is longer than 10 bytes.
func uleb(b []byte) (uint64, int) {
	var v uint64
	for i := 0; i < len(b) && i < 10; i++ {
		v |= uint64(b[i]&0x7f) << (7 * i)
		if b[i]&0x80 == 0 {
			return v, i + 1
		}
	}
	return 0, 0
}

// sleb decodes a signed LEB128 number from b, as uleb.
func sleb(b []byte) (int64, int) {
	var v int64
	for i := 0; i < len(b) && i < 10; i++ {
		v |= int64(b[i]&0x7f) << (7 * i)
		if b[i]&0x80 == 0 {
			if s := 7 * (i + 1); s < 64 && b[i]&0x40 != 0 {
				v |= -1 << s
			}
			return v, i + 1
		}
	}
	return 0, 0
}

// rowAt returns the row in effect at v in f: from f's table, built by the
// first lookup; when the Table's cache is full, computed for v alone into
// *scratch. ok is false when f's program is malformed.
func (t *Table) rowAt(f *fde, v uint64, scratch *row) (r *row, ok bool) {
	rs := f.rows.Load()
	if rs == nil {
		if rs = t.build(f); rs == nil {
			return scratch, rowOnce(f, v, scratch)
		}
	}
	if rs.bad {
		return nil, false
	}
	// The last row with locs[i] <= v (locs[0] is f.lo <= v).
	lo, hi := 1, len(rs.locs)
	for lo < hi {
		i := int(uint(lo+hi) >> 1)
		if rs.locs[i] <= v {
			lo = i + 1
		} else {
			hi = i
		}
	}
	return &rs.rows[lo-1], true
}

// rowOnce computes the row in effect at v in f into r (the interpreter's
// state is on the stack: nothing allocated); false when f's program is
// malformed.
//
//go:noinline
func rowOnce(f *fde, v uint64, r *row) bool {
	var m interp
	_, err := m.run(f, modeAt, v, nil)
	*r = m.cur
	return err == nil
}

// build builds and publishes f's table; nil when the Table's cache is full.
func (t *Table) build(f *fde) *rowSet {
	var m interp
	n, err := m.run(f, modeCount, 0, nil)
	rs := badRows
	if err == nil {
		size := int64(n) * rowBytes
		if t.cached.Add(size) > maxCache {
			t.cached.Add(-size)
			return nil
		}
		rs = &rowSet{locs: make([]uint64, n), rows: make([]row, n)}
		if _, err := m.run(f, modeFill, 0, rs); err != nil {
			t.cached.Add(-size)
			rs = badRows
		}
	}
	if !f.rows.CompareAndSwap(nil, rs) {
		if rs != badRows {
			t.cached.Add(-int64(len(rs.rows)) * rowBytes)
		}
		rs = f.rows.Load()
	}
	return rs
}
