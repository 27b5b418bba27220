// Package cfi reads call-frame information: the CIEs and FDEs of an ELF
// file's .eh_frame (the LSB Core format: pointer encodings chosen by the
// CIE's augmentation, pc-relative addresses, a CIE pointer counted back
// from itself) or .debug_frame (DWARF 5 §6.4.1: absolute addresses, CIE
// pointers as section offsets, CIE id all ones).
//
// An FDE gives a range of code [Begin, Begin+Size), its CFA program and
// its CIE: the initial instructions, alignment factors, return-address
// column and augmentation. The unwinder runs the programs; the
// symbolizer groups a stripped module's addresses by the ranges.
//
// The sections are the profiled processes' files, hence hostile. Every
// read is bounds-checked (no input panics the reader), the work per entry
// is bounded (augmentation strings of at most 32 bytes, LEB128 numbers of
// at most 32 bytes, each CIE decoded once), and the Limits bound the
// section, the number of FDEs and the length of a program.
package cfi

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// Limits on one section.
const (
	MaxSection = 64 << 20 // bytes of a section
	MaxFDEs    = 1 << 20  // FDEs per section (libLLVM-15 has 98k)
	MaxProgram = 64 << 10 // bytes of an FDE's program with its CIE's initial instructions (GCC 12's cc1: 20 KiB at most)

	maxAug = 32 // bytes of an augmentation string ("zPLR" and the like)
	maxLEB = 32 // bytes of a LEB128 number
)

// Section is one call-frame section to read.
type Section struct {
	Data    []byte
	Addr    uint64           // virtual address of Data[0] (.eh_frame: the base of pc-relative pointers)
	EH      bool             // .eh_frame; else .debug_frame
	PtrSize int              // bytes of a target address: 4 or 8
	Order   binary.ByteOrder // the file's byte order
}

// CIE is a Common Information Entry: what its FDEs share.
type CIE struct {
	Offset       int // of its length field in the section
	Version      uint8
	Augmentation string
	CodeAlign    uint64 // code alignment factor
	DataAlign    int64  // data alignment factor
	RA           uint64 // return address column
	Initial      []byte // initial instructions (a slice of the section's data)
	Signal       bool   // 'S': its FDEs are signal trampolines'
	enc          byte   // 'R': the encoding of its FDEs' addresses (absolute without)
	augData      bool   // 'z': its FDEs carry augmentation data
	ptrSize      int    // bytes of an absolute address
}

// FDE is a Frame Description Entry: the code [Begin, Begin+Size) and its
// CFA program.
type FDE struct {
	Begin, Size uint64
	Ins         []byte // instructions (a slice of the section's data)
	CIE         *CIE
}

// End is the address after the FDE's code (Begin when the range wraps).
func (f *FDE) End() uint64 {
	if e := f.Begin + f.Size; e >= f.Begin {
		return e
	}
	return f.Begin
}

// DWARF exception-header pointer encodings (LSB Core, .eh_frame).
const (
	pePtr      = 0x00
	peULEB     = 0x01
	peU2       = 0x02
	peU4       = 0x03
	peU8       = 0x04
	peSPtr     = 0x08
	peSLEB     = 0x09
	peS2       = 0x0a
	peS4       = 0x0b
	peS8       = 0x0c
	pePCRel    = 0x10
	peAligned  = 0x50
	peAppMask  = 0x70
	peIndirect = 0x80
	peOmit     = 0xff
)

// Reader reads a section's FDEs in section order. Its zero value is not
// usable: see NewReader.
type Reader struct {
	s     Section
	le    bool // s.Order is little-endian (read without an interface call)
	off   int  // next entry
	fdes  int
	cies  map[int]*CIE // by offset; nil: a CIE that cannot be read
	last  *CIE
	lastO int
	err   error
	stop  bool
}

// NewReader returns a Reader of s.
func NewReader(s Section) *Reader {
	if s.Order == nil {
		s.Order = binary.LittleEndian
	}
	if s.PtrSize != 4 {
		s.PtrSize = 8
	}
	r := &Reader{s: s, le: s.Order == binary.LittleEndian, cies: map[int]*CIE{}, lastO: -1}
	if len(s.Data) > MaxSection {
		r.halt(fmt.Errorf("section of %d bytes (limit %d)", len(s.Data), MaxSection))
	}
	return r
}

// Err is the first malformed entry met (nil: none). Next skips an FDE it
// cannot read (its CIE, its addresses or its augmentation data) and
// stops at an entry whose length leaves the section or beyond MaxFDEs
// FDEs; the FDEs it returned are well formed.
func (r *Reader) Err() error { return r.err }

func (r *Reader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

func (r *Reader) halt(err error) {
	r.fail(err)
	r.stop = true
}

func (r *Reader) u32(b []byte) uint32 {
	if r.le {
		return binary.LittleEndian.Uint32(b)
	}
	return r.s.Order.Uint32(b)
}

// header reads the framing of the entry at off: its content [start, end)
// and the width of its CIE id or pointer (4, or 8 in 64-bit DWARF).
func (r *Reader) header(off int) (start, end, idLen int, err error) {
	d := r.s.Data
	if len(d)-off < 4 {
		return 0, 0, 0, fmt.Errorf("entry at %#x: truncated length", off)
	}
	length := uint64(r.u32(d[off:]))
	start, idLen = off+4, 4
	if length == 0xffffffff {
		if len(d)-off < 12 {
			return 0, 0, 0, fmt.Errorf("entry at %#x: truncated 64-bit length", off)
		}
		length = r.s.Order.Uint64(d[off+4:])
		start, idLen = off+12, 8
	}
	if length > uint64(len(d)-start) {
		return 0, 0, 0, fmt.Errorf("entry at %#x: length %d past the end of the section", off, length)
	}
	if length != 0 && length < uint64(idLen) {
		return 0, 0, 0, fmt.Errorf("entry at %#x: length %d too short", off, length)
	}
	return start, start + int(length), idLen, nil
}

// id reads the CIE id or pointer at p.
func (r *Reader) id(p, idLen int) uint64 {
	if idLen == 4 {
		return uint64(r.u32(r.s.Data[p:]))
	}
	return r.s.Order.Uint64(r.s.Data[p:])
}

// isCIE says whether id marks a CIE.
func (r *Reader) isCIE(id uint64, idLen int) bool {
	if r.s.EH {
		return id == 0
	}
	return id == 1<<(8*idLen)-1
}

// Count is an upper bound of the FDEs Next returns (the entries up to the
// first that leaves the section, at most MaxFDEs+1), for sizing a result
// at once. It reads only lengths.
func (r *Reader) Count() int {
	d := r.s.Data
	n := 0
	for off := 0; off < len(d) && n <= MaxFDEs; n++ {
		if off <= len(d)-8 {
			if l := uint64(r.u32(d[off:])); l >= 4 && l != 0xffffffff && l <= uint64(len(d)-off-4) {
				off += 4 + int(l)
				continue
			}
		}
		_, end, _, err := r.header(off)
		if err != nil {
			break
		}
		off = end
	}
	return n
}

// Next returns the next FDE; false at the end of the section or where
// reading stopped (Err says why).
func (r *Reader) Next() (FDE, bool) {
	d := r.s.Data
	for !r.stop && r.off < len(d) {
		off := r.off
		var start, end, idLen int
		if l := uint64(0); off <= len(d)-8 {
			l = uint64(r.u32(d[off:]))
			start, end, idLen = off+4, off+4+int(l), 4
			if l < 4 || l == 0xffffffff || l > uint64(len(d)-start) {
				end = 0 // the general case below
			}
		}
		if end == 0 {
			var err error
			if start, end, idLen, err = r.header(off); err != nil {
				r.halt(err)
				break
			}
		}
		r.off = end
		if end == start { // a zero terminator
			continue
		}
		id := r.id(start, idLen)
		if r.isCIE(id, idLen) {
			continue
		}
		if r.fdes++; r.fdes > MaxFDEs {
			r.halt(fmt.Errorf("more than %d FDEs", MaxFDEs))
			break
		}
		cieOff := int(id)
		if r.s.EH {
			if id > uint64(start) {
				r.fail(fmt.Errorf("FDE at %#x: CIE pointer %#x before the section", off, id))
				continue
			}
			cieOff = start - int(id)
		} else if id >= uint64(len(d)) {
			r.fail(fmt.Errorf("FDE at %#x: CIE offset %#x past the section", off, id))
			continue
		}
		c := r.last
		if cieOff != r.lastO {
			var err error
			if c, err = r.cie(cieOff); err != nil {
				r.fail(fmt.Errorf("FDE at %#x: %w", off, err))
				continue
			}
		}
		if p := start + idLen; c.enc == pePCRel|peS4 && end-p >= 9 && (!c.augData || d[p+8] < 0x80) {
			// GCC's and LLVM's encoding, read at once.
			begin := r.s.Addr + uint64(p) + uint64(int64(int32(r.u32(d[p:]))))
			size := uint64(int64(int32(r.u32(d[p+4:]))))
			q := p + 8
			if c.augData {
				if n := int(d[q]); n > end-q-1 {
					r.fail(fmt.Errorf("FDE at %#x: augmentation data past its end", off))
					continue
				} else {
					q += 1 + n
				}
			}
			if len(c.Initial)+end-q > MaxProgram {
				continue
			}
			return FDE{Begin: begin, Size: size, Ins: d[q:end:end], CIE: c}, true
		}
		f, err := r.fde(c, start+idLen, end)
		if err != nil {
			r.fail(fmt.Errorf("FDE at %#x: %w", off, err))
			continue
		}
		if len(c.Initial)+len(f.Ins) > MaxProgram {
			continue
		}
		return f, true
	}
	return FDE{}, false
}

// fde reads an FDE of c whose fields are [p, end).
func (r *Reader) fde(c *CIE, p, end int) (FDE, error) {
	cur := cursor{d: r.s.Data[:end], p: p, order: r.s.Order}
	at := r.s.Addr + uint64(p)
	begin, ok := cur.ptr(c.enc, c.ptrSize, at)
	if !ok {
		return FDE{}, errors.New("truncated address")
	}
	size, ok := cur.ptr(c.enc&0x0f, c.ptrSize, 0)
	if !ok {
		return FDE{}, errors.New("truncated range")
	}
	if c.augData {
		n, ok := cur.uleb()
		if !ok || n > uint64(end-cur.p) {
			return FDE{}, errors.New("augmentation data past its end")
		}
		cur.p += int(n)
	}
	return FDE{Begin: begin, Size: size, Ins: cur.d[cur.p:end:end], CIE: c}, nil
}

// cie returns the CIE at off, decoded once.
func (r *Reader) cie(off int) (*CIE, error) {
	c, seen := r.cies[off]
	if !seen {
		var err error
		if c, err = r.readCIE(off); err != nil {
			r.fail(err)
		}
		r.cies[off] = c
	}
	if c == nil {
		return nil, fmt.Errorf("unreadable CIE at %#x", off)
	}
	r.last, r.lastO = c, off
	return c, nil
}

// readCIE decodes the CIE at off.
func (r *Reader) readCIE(off int) (*CIE, error) {
	start, end, idLen, err := r.header(off)
	if err != nil {
		return nil, err
	}
	if end == start || !r.isCIE(r.id(start, idLen), idLen) {
		return nil, fmt.Errorf("entry at %#x: not a CIE", off)
	}
	bad := func(what string) error { return fmt.Errorf("CIE at %#x: %s", off, what) }
	cur := cursor{d: r.s.Data[:end], p: start + idLen, order: r.s.Order}
	c := &CIE{Offset: off, ptrSize: r.s.PtrSize}
	v, ok := cur.byte()
	if !ok {
		return nil, bad("truncated")
	}
	if c.Version = v; v != 1 && v != 3 && v != 4 {
		return nil, bad(fmt.Sprintf("version %d", v))
	}
	aug := cur.p
	for cur.p < end && cur.d[cur.p] != 0 && cur.p-aug <= maxAug {
		cur.p++
	}
	if cur.p >= end || cur.p-aug > maxAug {
		return nil, bad("augmentation string unterminated or longer than 32 bytes")
	}
	c.Augmentation = string(cur.d[aug:cur.p])
	cur.p++
	if c.Augmentation == "eh" { // GCC 2's: the address of an exception table
		cur.p += r.s.PtrSize
	}
	if c.Version == 4 {
		as, ok1 := cur.byte()
		ss, ok2 := cur.byte()
		if !ok1 || !ok2 || (as != 4 && as != 8) || ss != 0 {
			return nil, bad("address or segment selector size")
		}
		c.ptrSize = int(as)
	}
	if c.CodeAlign, ok = cur.uleb(); !ok {
		return nil, bad("truncated code alignment factor")
	}
	if c.DataAlign, ok = cur.sleb(); !ok {
		return nil, bad("truncated data alignment factor")
	}
	if c.Version == 1 {
		b, ok := cur.byte()
		if !ok {
			return nil, bad("truncated return address column")
		}
		c.RA = uint64(b)
	} else if c.RA, ok = cur.uleb(); !ok {
		return nil, bad("truncated return address column")
	}
	if c.Augmentation == "" || c.Augmentation == "eh" {
		if cur.p > end {
			return nil, bad("truncated")
		}
		c.Initial = cur.d[cur.p:end:end]
		return c, nil
	}
	if c.Augmentation[0] != 'z' {
		return nil, bad(fmt.Sprintf("augmentation %q", c.Augmentation))
	}
	c.augData = true
	n, ok := cur.uleb()
	if !ok || n > uint64(end-cur.p) {
		return nil, bad("augmentation data past its end")
	}
	// The augmentation data, by the string's letters; an unknown letter
	// ends their reading (the length still says where the instructions
	// start), as in GCC's unwinder.
	data := cursor{d: cur.d[:cur.p+int(n)], p: cur.p, order: r.s.Order}
	cur.p += int(n)
letters:
	for _, l := range c.Augmentation[1:] {
		switch l {
		case 'R':
			e, ok := data.byte()
			if !ok || !fdeEncoding(e) {
				return nil, bad(fmt.Sprintf("FDE address encoding %#x", e))
			}
			c.enc = e
		case 'L':
			if _, ok := data.byte(); !ok {
				return nil, bad("truncated LSDA encoding")
			}
		case 'P':
			e, ok := data.byte()
			if !ok || e == peOmit || e&peAppMask == peAligned {
				return nil, bad(fmt.Sprintf("personality encoding %#x", e))
			}
			if _, ok := data.ptr(e&0x0f, c.ptrSize, 0); !ok {
				return nil, bad("truncated personality")
			}
		case 'S':
			c.Signal = true
		case 'B', 'G': // AArch64: branch target identification, memory tags
		default:
			break letters
		}
	}
	c.Initial = cur.d[cur.p:end:end]
	return c, nil
}

// fdeEncoding says whether e can encode an FDE's addresses in a file:
// a defined size, absolute or pc-relative.
func fdeEncoding(e byte) bool {
	switch e & 0x0f {
	case pePtr, peULEB, peU2, peU4, peU8, peSPtr, peSLEB, peS2, peS4, peS8:
	default:
		return false
	}
	return e&0xf0 == 0 || e&0xf0 == pePCRel
}

// cursor reads d from p on; every read checks its bounds.
type cursor struct {
	d     []byte
	p     int
	order binary.ByteOrder
}

func (c *cursor) byte() (byte, bool) {
	if c.p < 0 || c.p >= len(c.d) {
		return 0, false
	}
	c.p++
	return c.d[c.p-1], true
}

func (c *cursor) uleb() (uint64, bool) {
	var v uint64
	for i, shift := 0, uint(0); i < maxLEB && c.p < len(c.d); i, shift = i+1, shift+7 {
		b := c.d[c.p]
		c.p++
		if shift < 64 {
			v |= uint64(b&0x7f) << shift
		}
		if b&0x80 == 0 {
			return v, true
		}
	}
	return 0, false
}

func (c *cursor) sleb() (int64, bool) {
	var v int64
	for i, shift := 0, uint(0); i < maxLEB && c.p < len(c.d); i++ {
		b := c.d[c.p]
		c.p++
		if shift < 64 {
			v |= int64(b&0x7f) << shift
		}
		shift += 7
		if b&0x80 == 0 {
			if shift < 64 && b&0x40 != 0 {
				v |= -1 << shift
			}
			return v, true
		}
	}
	return 0, false
}

// fixed reads n bytes as an unsigned number.
func (c *cursor) fixed(n int) (uint64, bool) {
	if c.p < 0 || n > len(c.d)-c.p {
		return 0, false
	}
	b := c.d[c.p : c.p+n]
	c.p += n
	switch n {
	case 2:
		return uint64(c.order.Uint16(b)), true
	case 4:
		return uint64(c.order.Uint32(b)), true
	default:
		return c.order.Uint64(b), true
	}
}

// ptr reads a pointer in encoding e (its size format; pc-relative adds
// at, the address of the pointer); ptrSize is the size of an absolute one.
func (c *cursor) ptr(e byte, ptrSize int, at uint64) (uint64, bool) {
	var v uint64
	var ok bool
	switch e & 0x0f {
	case pePtr, peSPtr:
		v, ok = c.fixed(ptrSize)
		if ok && ptrSize == 4 && e&0x0f == peSPtr {
			v = uint64(int64(int32(v)))
		}
	case peULEB:
		v, ok = c.uleb()
	case peSLEB:
		var s int64
		s, ok = c.sleb()
		v = uint64(s)
	case peU2:
		v, ok = c.fixed(2)
	case peS2:
		v, ok = c.fixed(2)
		v = uint64(int64(int16(v)))
	case peU4:
		v, ok = c.fixed(4)
	case peS4:
		v, ok = c.fixed(4)
		v = uint64(int64(int32(v)))
	case peU8, peS8:
		v, ok = c.fixed(8)
	}
	if !ok {
		return 0, false
	}
	if e&peAppMask == pePCRel {
		v += at
	}
	return v, true
}

// Parse reads all of s's FDEs, sorted by Begin (FDEs of equal Begin in
// section order). The error is Reader.Err's: the FDEs are those read.
func Parse(s Section) ([]FDE, error) {
	r := NewReader(s)
	out := make([]FDE, 0, r.Count())
	for {
		f, ok := r.Next()
		if !ok {
			break
		}
		out = append(out, f)
	}
	if !slices.IsSortedFunc(out, byBegin) {
		slices.SortStableFunc(out, byBegin)
	}
	return out, r.Err()
}

func byBegin(a, b FDE) int { return cmp.Compare(a.Begin, b.Begin) }
