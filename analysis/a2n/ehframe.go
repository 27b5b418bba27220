package a2n

import (
	"debug/elf"
	"encoding/binary"
)

// Function ranges from .eh_frame. A module without .symtab (most
// distribution libraries) still carries call-frame information for
// unwinding: one FDE per function (and per cold part), with its start
// address and length. Those ranges group a stripped module's addresses by
// function where no symbol names them. Only what locating an FDE's range
// needs is decoded: the CIE's pointer encoding and the FDE's pc_begin and
// pc_range; everything is bounds-checked (the file is untrusted).

// DWARF exception-header pointer encodings (LSB Core, .eh_frame).
const (
	pePtr     = 0x00
	peULEB    = 0x01
	peU2      = 0x02
	peU4      = 0x03
	peU8      = 0x04
	peSLEB    = 0x09
	peS2      = 0x0a
	peS4      = 0x0b
	peS8      = 0x0c
	pePCRel   = 0x10
	peOmit    = 0xff
	peApplyMs = 0x70
)

type ehReader struct {
	data   []byte
	base   uint64 // address of data[0]
	bo     binary.ByteOrder
	ptrLen int
}

func (r *ehReader) uleb(p int) (uint64, int, bool) {
	var v uint64
	for shift := uint(0); p < len(r.data); shift += 7 {
		c := r.data[p]
		p++
		if shift < 64 {
			v |= uint64(c&0x7f) << shift
		}
		if c&0x80 == 0 {
			return v, p, true
		}
	}
	return 0, p, false
}

func (r *ehReader) sleb(p int) (int64, int, bool) {
	var v int64
	var shift uint
	for p < len(r.data) {
		c := r.data[p]
		p++
		if shift < 64 {
			v |= int64(c&0x7f) << shift
		}
		shift += 7
		if c&0x80 == 0 {
			if shift < 64 && c&0x40 != 0 {
				v |= -1 << shift
			}
			return v, p, true
		}
	}
	return 0, p, false
}

// ptr reads a pointer in encoding enc at p. Only absolute and pc-relative
// applications are meaningful in a file (others are refused).
func (r *ehReader) ptr(enc byte, p int) (uint64, int, bool) {
	if enc == peOmit {
		return 0, p, false
	}
	at := p
	var v uint64
	need := func(n int) bool { return p >= 0 && n <= len(r.data)-p }
	switch enc & 0x0f {
	case pePtr:
		if !need(r.ptrLen) {
			return 0, p, false
		}
		if r.ptrLen == 8 {
			v = r.bo.Uint64(r.data[p:])
		} else {
			v = uint64(r.bo.Uint32(r.data[p:]))
		}
		p += r.ptrLen
	case peULEB:
		var ok bool
		if v, p, ok = r.uleb(p); !ok {
			return 0, p, false
		}
	case peSLEB:
		s, np, ok := r.sleb(p)
		if !ok {
			return 0, p, false
		}
		v, p = uint64(s), np
	case peU2, peS2:
		if !need(2) {
			return 0, p, false
		}
		v = uint64(r.bo.Uint16(r.data[p:]))
		if enc&0x0f == peS2 {
			v = uint64(int64(int16(v)))
		}
		p += 2
	case peU4, peS4:
		if !need(4) {
			return 0, p, false
		}
		v = uint64(r.bo.Uint32(r.data[p:]))
		if enc&0x0f == peS4 {
			v = uint64(int64(int32(v)))
		}
		p += 4
	case peU8, peS8:
		if !need(8) {
			return 0, p, false
		}
		v = r.bo.Uint64(r.data[p:])
		p += 8
	default:
		return 0, p, false
	}
	switch enc & peApplyMs {
	case 0:
	case pePCRel:
		v += r.base + uint64(at)
	default:
		return 0, p, false // datarel, textrel, funcrel, aligned: not used for FDE ranges
	}
	if enc&0x80 != 0 { // indirect: the value is in memory at run time
		return 0, p, false
	}
	return v, p, true
}

// cieEncoding returns the FDE pointer encoding a CIE declares ('R'
// augmentation; absolute pointers without it).
func (r *ehReader) cieEncoding(p, end int) (byte, bool) {
	if p >= end {
		return 0, false
	}
	version := r.data[p]
	p++
	augStart := p
	for p < end && r.data[p] != 0 {
		p++
	}
	if p >= end {
		return 0, false
	}
	aug := string(r.data[augStart:p])
	p++
	if len(aug) >= 2 && aug[:2] == "eh" {
		p += r.ptrLen
	}
	var ok bool
	if _, p, ok = r.uleb(p); !ok { // code alignment
		return 0, false
	}
	if _, p, ok = r.sleb(p); !ok { // data alignment
		return 0, false
	}
	if version == 1 {
		p++
	} else if _, p, ok = r.uleb(p); !ok { // return address register
		return 0, false
	}
	if aug == "" || aug[0] != 'z' {
		return pePtr, p <= end
	}
	if _, p, ok = r.uleb(p); !ok { // augmentation data length
		return 0, false
	}
	for _, c := range aug[1:] {
		if p >= end {
			return 0, false
		}
		switch c {
		case 'R':
			return r.data[p], true
		case 'L':
			p++
		case 'P':
			penc := r.data[p]
			p++
			if _, p, ok = r.ptr(penc&^0x80&^peApplyMs, p); !ok {
				return 0, false
			}
		case 'S', 'B', 'G':
		default:
			return pePtr, true // unknown augmentation: the rest cannot be read
		}
	}
	return pePtr, true
}

// fdeRanges returns the [start, start+len) code ranges of the FDEs in
// f's .eh_frame, in section order.
func fdeRanges(f *elf.File) []fdeRange {
	sec := f.Section(".eh_frame")
	if sec == nil || sec.Type == elf.SHT_NOBITS {
		return nil
	}
	data, err := sectionData(sec)
	if err != nil {
		return nil
	}
	r := &ehReader{data: data, base: sec.Addr, bo: f.ByteOrder, ptrLen: 8}
	if f.Class == elf.ELFCLASS32 {
		r.ptrLen = 4
	}
	return r.ranges()
}

func (r *ehReader) ranges() []fdeRange {
	data := r.data
	encs := map[int]int16{} // CIE offset -> encoding (-1: unreadable)
	lastCIE, lastEnc := -1, int16(0)
	out := make([]fdeRange, 0, r.count())
	for off := 0; off+8 <= len(data); {
		length := uint64(r.bo.Uint32(data[off:]))
		hdr, idLen := 4, 4
		if length == 0 {
			break // terminator
		}
		if length == 0xffffffff {
			if off+16 > len(data) {
				break
			}
			length = r.bo.Uint64(data[off+4:])
			hdr, idLen = 12, 8
		}
		start := off + hdr
		if length > uint64(len(data)-start) || length < uint64(idLen) {
			break
		}
		end := start + int(length)
		var id uint64
		if idLen == 4 {
			id = uint64(r.bo.Uint32(data[start:]))
		} else {
			id = r.bo.Uint64(data[start:])
		}
		if id != 0 { // an FDE: id is the distance back to its CIE
			if cie := uint64(start) - id; id <= uint64(start) {
				enc, ok := int16(0), false
				if int(cie) == lastCIE {
					enc, ok = lastEnc, true
				} else if enc, ok = encs[int(cie)]; !ok {
					enc = r.cieAt(int(cie))
					encs[int(cie)] = enc
				}
				lastCIE, lastEnc = int(cie), enc
				if enc >= 0 {
					p := start + idLen
					if begin, p, ok := r.ptr(byte(enc), p); ok && p <= end {
						if size, p, ok := r.ptr(byte(enc)&0x0f, p); ok && p <= end && size > 0 && begin != 0 {
							out = append(out, fdeRange{begin, size})
						}
					}
				}
			}
		}
		off = end
	}
	return out
}

// count is an upper bound of the number of FDEs ranges finds (the entries
// before the terminator), for sizing its result at once.
func (r *ehReader) count() int {
	data := r.data
	n := 0
	for off := 0; off+8 <= len(data); {
		length := uint64(r.bo.Uint32(data[off:]))
		hdr := 4
		if length == 0 {
			break
		}
		if length == 0xffffffff {
			if off+16 > len(data) {
				break
			}
			length = r.bo.Uint64(data[off+4:])
			hdr = 12
		}
		if length > uint64(len(data)-off-hdr) {
			break
		}
		n++
		off += hdr + int(length)
	}
	return n
}

// cieAt decodes the CIE whose length field is at off.
func (r *ehReader) cieAt(off int) int16 {
	data := r.data
	if off < 0 || off+8 > len(data) {
		return -1
	}
	length := uint64(r.bo.Uint32(data[off:]))
	hdr, idLen := 4, 4
	if length == 0xffffffff {
		if off+16 > len(data) {
			return -1
		}
		length = r.bo.Uint64(data[off+4:])
		hdr, idLen = 12, 8
	}
	start := off + hdr
	if length > uint64(len(data)-start) || length < uint64(idLen)+1 {
		return -1
	}
	end := start + int(length)
	if (idLen == 4 && r.bo.Uint32(data[start:]) != 0) || (idLen == 8 && r.bo.Uint64(data[start:]) != 0) {
		return -1 // not a CIE
	}
	enc, ok := r.cieEncoding(start+idLen, end)
	if !ok {
		return -1
	}
	return int16(enc)
}
