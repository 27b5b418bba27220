// Package trace holds the PI trace record format: the 12-byte record header
// of PI's Figure 1 (16-bit type-and-length, 16-bit major, 32-bit minor,
// 32-bit low half of the time stamp), the variable data that follows it, the
// table of major/minor codes, and an encoder and decoder for records.
//
// The layout is documented in docs/trace-format.md and mirrored, for the
// kernel module, in kmod/uapi/pitrace.h; a test checks the two agree.
//
// All multi-byte values are little-endian. Records are 4-byte aligned.
package trace

import (
	"encoding/binary"
	"fmt"
)

// HeaderSize is the size in bytes of the fixed record header.
const HeaderSize = 12

// MaxRecordSize is the largest record the 12-bit length field can express
// (4095 units of 4 bytes).
const MaxRecordSize = 0xfff * 4

// Data layouts, stored in the top 4 bits of the type-and-length field.
const (
	// LayoutFixed: the variable data is the code's fixed fields only.
	LayoutFixed = 0
	// LayoutString: the fixed fields are followed by a NUL-terminated
	// string, padded with NULs to a multiple of 4 bytes.
	LayoutString = 1
	// LayoutBytes: the fixed fields are followed by a u32 byte count and
	// that many opaque bytes, padded to a multiple of 4 bytes.
	LayoutBytes = 2
	// LayoutWords: the variable data is a sequence of u32 words with no
	// code-specific meaning (user hook records).
	LayoutWords = 3
)

// TypeLen packs a data layout and a record length (bytes, multiple of 4).
func TypeLen(layout int, length int) uint16 {
	return uint16(layout&0xf)<<12 | uint16(length/4)&0xfff
}

// SplitTypeLen unpacks a type-and-length field into layout and length in bytes.
func SplitTypeLen(tl uint16) (layout int, length int) {
	return int(tl >> 12), int(tl&0xfff) * 4
}

// Record is one decoded trace record.
type Record struct {
	Major  uint16
	Minor  uint32
	Layout int
	// Time is the full 64-bit time stamp: the record's low 32 bits joined
	// with the high half from the last time-high record of its stream.
	// Decode alone sets only the low 32 bits.
	Time uint64
	// Fixed holds the fixed fields, each widened to 64 bits, in the order
	// of the code's field table. For codes not in the table, and for
	// LayoutWords, each u32 word is one value.
	Fixed []uint64
	// Str is the trailing string (LayoutString) or the opaque bytes
	// (LayoutBytes).
	Str string
	// CPU is the CPU whose buffer held the record (set by stream readers).
	CPU int
	// MTE is true when the record came from an MTE buffer.
	MTE bool
}

// Field returns fixed field i, or 0 if the record has fewer fields.
func (r *Record) Field(i int) uint64 {
	if i < len(r.Fixed) {
		return r.Fixed[i]
	}
	return 0
}

// Encode appends one record to dst. fields must match the code's field table
// (missing trailing fields are written as 0); codes not in the table are
// written with every field as a u32 word. str is written when layout is
// LayoutString or LayoutBytes. The time stamp's low 32 bits are written;
// keeping time-high records in the stream is the writer's job.
func Encode(dst []byte, major uint16, minor uint32, layout int, time uint64, fields []uint64, str string) ([]byte, error) {
	var spec *Spec
	if layout != LayoutWords { // words need no table: the hot path of method events
		spec = Lookup(major, minor)
	}
	if spec == nil && layout == LayoutBytes && len(fields) > 0 {
		return dst, fmt.Errorf("trace: record major 0x%x minor 0x%x: a record without a code-table entry carries words or bytes, not both", major, minor)
	}
	fixedLen := 0
	if spec != nil && layout != LayoutWords {
		for _, f := range spec.Fields {
			fixedLen += f.Width
		}
	} else {
		fixedLen = 4 * len(fields)
	}
	n := HeaderSize + fixedLen
	switch layout {
	case LayoutString:
		n += len(str) + 1
	case LayoutBytes:
		n += 4 + len(str)
	}
	n = (n + 3) &^ 3
	if n > MaxRecordSize {
		return dst, fmt.Errorf("trace: record major 0x%x minor 0x%x is %d bytes, more than the %d-byte maximum", major, minor, n, MaxRecordSize)
	}
	start := len(dst)
	dst = append(dst, make([]byte, n)...)
	b := dst[start:]
	binary.LittleEndian.PutUint16(b[0:], TypeLen(layout, n))
	binary.LittleEndian.PutUint16(b[2:], major)
	binary.LittleEndian.PutUint32(b[4:], minor)
	binary.LittleEndian.PutUint32(b[8:], uint32(time))
	off := HeaderSize
	if spec != nil && layout != LayoutWords {
		for i, f := range spec.Fields {
			var v uint64
			if i < len(fields) {
				v = fields[i]
			}
			if f.Width == 8 {
				binary.LittleEndian.PutUint64(b[off:], v)
			} else {
				binary.LittleEndian.PutUint32(b[off:], uint32(v))
			}
			off += f.Width
		}
	} else {
		for _, v := range fields {
			binary.LittleEndian.PutUint32(b[off:], uint32(v))
			off += 4
		}
	}
	switch layout {
	case LayoutString:
		copy(b[off:], str)
	case LayoutBytes:
		binary.LittleEndian.PutUint32(b[off:], uint32(len(str)))
		copy(b[off+4:], str)
	}
	return dst, nil
}

// DecodeError reports malformed input with the byte offset where it was found.
type DecodeError struct {
	Offset int64
	Msg    string
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("trace: bad record at byte offset %d: %s", e.Offset, e.Msg)
}

// Decode decodes the record at the start of b. It returns the record and its
// length in bytes. base is the offset of b within its stream, used only in
// error messages. Decode never panics on malformed input.
func Decode(b []byte, base int64) (Record, int, error) {
	var r Record
	n, err := DecodeInto(b, base, &r, nil)
	return r, n, err
}

// DecodeInto is Decode into r, with r.Fixed placed in scratch when it is
// large enough (no allocation on the hot path of readers).
func DecodeInto(b []byte, base int64, rp *Record, scratch []uint64) (int, error) {
	r := rp
	*r = Record{}
	if len(b) < HeaderSize {
		return 0, &DecodeError{base, fmt.Sprintf("truncated header: %d bytes left, need %d", len(b), HeaderSize)}
	}
	layout, n := SplitTypeLen(binary.LittleEndian.Uint16(b))
	if n < HeaderSize {
		return 0, &DecodeError{base, fmt.Sprintf("record length %d is shorter than the %d-byte header", n, HeaderSize)}
	}
	if n > len(b) {
		return 0, &DecodeError{base, fmt.Sprintf("truncated record: length %d, %d bytes left", n, len(b))}
	}
	if layout > LayoutWords {
		return 0, &DecodeError{base, fmt.Sprintf("unknown data layout %d", layout)}
	}
	r.Layout = layout
	r.Major = binary.LittleEndian.Uint16(b[2:])
	r.Minor = binary.LittleEndian.Uint32(b[4:])
	r.Time = uint64(binary.LittleEndian.Uint32(b[8:]))
	data := b[HeaderSize:n]
	spec := Lookup(r.Major, r.Minor)
	off := 0
	if spec != nil && layout != LayoutWords {
		r.Fixed = fixedSlice(scratch, len(spec.Fields))
		for i, f := range spec.Fields {
			if off+f.Width > len(data) {
				return 0, &DecodeError{base + int64(HeaderSize+off), fmt.Sprintf("%s record too short for field %s", spec.Name, f.Name)}
			}
			if f.Width == 8 {
				r.Fixed[i] = binary.LittleEndian.Uint64(data[off:])
			} else {
				r.Fixed[i] = uint64(binary.LittleEndian.Uint32(data[off:]))
			}
			off += f.Width
		}
	} else if layout == LayoutWords || layout == LayoutFixed {
		r.Fixed = fixedSlice(scratch, len(data)/4)
		for i := range r.Fixed {
			r.Fixed[i] = uint64(binary.LittleEndian.Uint32(data[4*i:]))
		}
		off = len(data)
	}
	switch layout {
	case LayoutString:
		s := data[off:]
		end := -1
		for i, c := range s {
			if c == 0 {
				end = i
				break
			}
		}
		if end < 0 {
			return 0, &DecodeError{base + int64(HeaderSize+off), "string not NUL-terminated within the record"}
		}
		r.Str = string(s[:end])
	case LayoutBytes:
		if off+4 > len(data) {
			return 0, &DecodeError{base + int64(HeaderSize+off), "record too short for byte count"}
		}
		cnt := int(binary.LittleEndian.Uint32(data[off:]))
		if cnt < 0 || off+4+cnt > len(data) {
			return 0, &DecodeError{base + int64(HeaderSize+off), fmt.Sprintf("byte count %d overruns the record", cnt)}
		}
		r.Str = string(data[off+4 : off+4+cnt])
	}
	return n, nil
}

func fixedSlice(scratch []uint64, n int) []uint64 {
	if n <= cap(scratch) {
		return scratch[:n]
	}
	return make([]uint64, n)
}
