package trace

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// Reader walks the records of one per-CPU buffer segment in order, joining
// each record's low 32-bit time stamp with the high half set by the last
// TIME_HIGH record seen. It never panics on malformed input.
type Reader struct {
	buf  []byte
	off  int
	base int64 // byte offset of buf in its file, for error messages
	high uint64
	cpu  int
	mte  bool
	// scratch holds the current record's fixed fields.
	scratch [16]uint64
}

// NewReader returns a reader over buf. base is buf's offset within the file
// (used in error messages); high is the time-high value in force at the start
// (segments written by the facility begin with a TIME_HIGH record, so 0 is
// the usual value).
func NewReader(buf []byte, base int64, cpu int, mte bool, high uint32) *Reader {
	return &Reader{buf: buf, base: base, cpu: cpu, mte: mte, high: uint64(high) << 32}
}

// Refill goes on reading the stream from buf, whose offset in the file is
// base: the reader keeps its time-high value (a stream read in pieces, a
// record cut at a piece's end given again at the start of the next).
func (r *Reader) Refill(buf []byte, base int64) {
	r.buf, r.off, r.base = buf, 0, base
}

// CPU returns the CPU the reader's records are of.
func (r *Reader) CPU() int { return r.cpu }

// Buffered returns the number of bytes of the buffer not read yet.
func (r *Reader) Buffered() int { return len(r.buf) - r.off }

// Offset returns the file offset of the next record.
func (r *Reader) Offset() int64 { return r.base + int64(r.off) }

// Next returns the next record. ok is false at the end of the buffer. A
// run of zero bytes at the end (unused space of a segment) ends the buffer.
func (r *Reader) Next() (rec Record, ok bool, err error) {
	var x Record
	ok, err = r.NextInto(&x)
	if ok {
		x.Fixed = append([]uint64(nil), x.Fixed...)
	}
	return x, ok, err
}

// NextInto reads the next record into rec without allocating; rec.Fixed is
// valid until the next call.
func (r *Reader) NextInto(rec *Record) (ok bool, err error) {
	if r.off >= len(r.buf) {
		return false, nil
	}
	rest := r.buf[r.off:]
	if len(rest) >= 2 && binary.LittleEndian.Uint16(rest) == 0 {
		// Padding: the rest of the segment must be zero.
		for i, c := range rest {
			if c != 0 {
				return false, &DecodeError{r.Offset() + int64(i), "non-zero bytes after a zero record header"}
			}
		}
		r.off = len(r.buf)
		return false, nil
	}
	n, err := DecodeInto(rest, r.Offset(), rec, r.scratch[:])
	if err != nil {
		return false, err
	}
	r.off += n
	rec.CPU = r.cpu
	rec.MTE = r.mte
	if rec.Major == MajorSys && rec.Minor == SysTimeHigh {
		if len(rec.Fixed) < 1 {
			return false, &DecodeError{r.Offset() - int64(n), "TIME_HIGH record without a value"}
		}
		r.high = rec.Fixed[0] << 32
		rec.Time = r.high | rec.Time
		return true, nil
	}
	rec.Time |= r.high
	return true, nil
}

// NextOf reads the next record only if it is a whole record of code
// (major, minor) and layout of at least size bytes: it returns the
// record's bytes (header included; FieldOffsets places its fixed fields,
// TrailingBytes finds a LayoutBytes record's bytes) and its full time.
// Otherwise it reads nothing and returns false, and the caller reads the
// record with NextInto (which decodes or reports it). Readers of many
// records of one code (a profile's ticks and stacks) skip the general
// decoding, and its copy of the trailing bytes, this way.
func (r *Reader) NextOf(major uint16, minor uint32, layout, size int) (b []byte, time uint64, ok bool) {
	rest := r.buf[r.off:]
	if len(rest) < HeaderSize {
		return nil, 0, false
	}
	tl := binary.LittleEndian.Uint16(rest)
	n := int(tl&0xfff) * 4
	if int(tl>>12) != layout || n < size || n < HeaderSize || n > len(rest) ||
		binary.LittleEndian.Uint16(rest[2:]) != major || binary.LittleEndian.Uint32(rest[4:]) != minor {
		return nil, 0, false
	}
	r.off += n
	return rest[:n], r.high | uint64(binary.LittleEndian.Uint32(rest[8:])), true
}

// TrailingBytes returns the opaque bytes of a LayoutBytes record b whose
// fixed fields end at size (FieldOffsets' size): false if b has no room
// for the byte count or the count overruns b (as DecodeInto reports).
func TrailingBytes(b []byte, size int) ([]byte, bool) {
	if size < HeaderSize || size+4 > len(b) {
		return nil, false
	}
	cnt := uint64(binary.LittleEndian.Uint32(b[size:]))
	if cnt > uint64(len(b)-size-4) {
		return nil, false
	}
	return b[size+4 : size+4+int(cnt)], true
}

// IsTimeHigh reports whether b starts with a TIME_HIGH record header: the
// 8 bytes that begin every segment (type and length for a 16-byte fixed
// record, major 0x01, minor 0x1).
func IsTimeHigh(b []byte) bool {
	return len(b) >= TimeHighSize && bytes.Equal(b[:len(timeHighHead)], timeHighHead[:])
}

// Resync skips a record that would not decode: it moves the reader to the
// next TIME_HIGH record of the buffer (4-byte aligned, after the current
// record's start, not going back in time), where decoding can start again
// as at the start of a segment. It returns the number of bytes skipped and
// whether such a record was found; if not, the reader is at the end.
func (r *Reader) Resync() (skipped int, found bool) {
	from := r.off
	minHigh := uint32(r.high >> 32)
	for p := from + 4; p+TimeHighSize <= len(r.buf); p += 4 {
		i := bytes.Index(r.buf[p:], timeHighHead[:])
		if i < 0 {
			break
		}
		p += i
		if p%4 != 0 {
			p &^= 3
			continue
		}
		if p+TimeHighSize <= len(r.buf) && binary.LittleEndian.Uint32(r.buf[p+HeaderSize:]) >= minHigh {
			r.off = p
			return p - from, true
		}
	}
	r.off = len(r.buf)
	return len(r.buf) - from, false
}

// timeHighHead is what IsTimeHigh looks for.
var timeHighHead = func() (h [8]byte) {
	binary.LittleEndian.PutUint16(h[0:], TypeLen(LayoutFixed, TimeHighSize))
	binary.LittleEndian.PutUint16(h[2:], MajorSys)
	binary.LittleEndian.PutUint32(h[4:], SysTimeHigh)
	return
}()

// Writer appends records to a buffer and keeps TIME_HIGH records in the
// stream: one is written first and then whenever the upper 32 bits of the
// time stamp change. It is the Go counterpart of the module's record writer,
// used by the daemon backend and by tests.
type Writer struct {
	Buf      []byte
	high     uint64
	haveHigh bool
}

// Reset empties the buffer and forces a TIME_HIGH record before the next record.
func (w *Writer) Reset() {
	w.Buf = w.Buf[:0]
	w.haveHigh = false
}

// ForceTimeHigh makes the next record be preceded by a TIME_HIGH record.
func (w *Writer) ForceTimeHigh() { w.haveHigh = false }

// TimeHighSize is the encoded size of a TIME_HIGH record.
const TimeHighSize = HeaderSize + 4

// SizeWithTimeHigh returns how many bytes writing a record of size n at time
// t would take, counting a TIME_HIGH record if one is needed.
func (w *Writer) SizeWithTimeHigh(n int, t uint64) int {
	if !w.haveHigh || t>>32 != w.high {
		return n + TimeHighSize
	}
	return n
}

func (w *Writer) timeHigh(t uint64) {
	if w.haveHigh && t>>32 == w.high {
		return
	}
	w.high = t >> 32
	w.haveHigh = true
	var b [TimeHighSize]byte
	binary.LittleEndian.PutUint16(b[0:], TypeLen(LayoutFixed, TimeHighSize))
	binary.LittleEndian.PutUint16(b[2:], MajorSys)
	binary.LittleEndian.PutUint32(b[4:], SysTimeHigh)
	binary.LittleEndian.PutUint32(b[8:], uint32(t))
	binary.LittleEndian.PutUint32(b[12:], uint32(t>>32))
	w.Buf = append(w.Buf, b[:]...)
}

// Write appends one record (see Encode), preceded by a TIME_HIGH record when needed.
func (w *Writer) Write(major uint16, minor uint32, layout int, t uint64, fields []uint64, str string) error {
	mark := len(w.Buf)
	hadHigh, oldHigh := w.haveHigh, w.high
	w.timeHigh(t)
	b, err := Encode(w.Buf, major, minor, layout, t, fields, str)
	if err != nil {
		w.Buf = w.Buf[:mark]
		w.haveHigh, w.high = hadHigh, oldHigh
		return err
	}
	w.Buf = b
	return nil
}

// WriteRecord appends rec, one whole record as Encode writes it (its
// header's length is len(rec)), with its time stamp's low half replaced by
// t's, preceded by a TIME_HIGH record when needed: a record that arrived
// encoded goes in without being decoded and encoded again. The caller has
// checked rec (RecordSize).
func (w *Writer) WriteRecord(rec []byte, t uint64) {
	w.timeHigh(t)
	start := len(w.Buf)
	w.Buf = append(w.Buf, rec...)
	binary.LittleEndian.PutUint32(w.Buf[start+8:], uint32(t))
}

// WriteRecords appends recs, whole records as Encode writes them, each
// keeping its own time stamp, all of the time-high half of t: preceded by
// a TIME_HIGH record when needed. The caller has checked them.
func (w *Writer) WriteRecords(recs []byte, t uint64) {
	w.timeHigh(t)
	w.Buf = append(w.Buf, recs...)
}

// RecordSize returns the length rec's header gives, if rec is exactly one
// record of that length in a known layout: at least the header, a multiple
// of 4 bytes (the length field counts words).
func RecordSize(rec []byte) (int, bool) {
	if len(rec) < HeaderSize {
		return 0, false
	}
	layout, n := SplitTypeLen(binary.LittleEndian.Uint16(rec))
	return n, n == len(rec) && layout <= LayoutWords
}

// EncodedSize returns the size a record would have, without writing it.
func EncodedSize(major uint16, minor uint32, layout int, nfields int, str string) int {
	n := HeaderSize
	var spec *Spec
	if layout != LayoutWords {
		spec = Lookup(major, minor)
	}
	if spec != nil {
		for _, f := range spec.Fields {
			n += f.Width
		}
	} else {
		n += 4 * nfields
	}
	switch layout {
	case LayoutString:
		n += len(str) + 1
	case LayoutBytes:
		n += 4 + len(str)
	}
	return (n + 3) &^ 3
}

// Format renders a record as one line of text (the post.show form).
func Format(r *Record) string {
	spec := Lookup(r.Major, r.Minor)
	name := fmt.Sprintf("%s/0x%x", MajorName(r.Major), r.Minor)
	if spec != nil {
		name = spec.Name
	}
	out := fmt.Sprintf("%3d %s %-13s", r.CPU, fmtTime(r.Time), name)
	if spec != nil && r.Layout != LayoutWords {
		for i, f := range spec.Fields {
			if f.Hex {
				out += fmt.Sprintf(" %s=0x%x", f.Name, r.Field(i))
			} else {
				out += fmt.Sprintf(" %s=%d", f.Name, r.Field(i))
			}
		}
		if spec.Layout == LayoutString {
			out += fmt.Sprintf(" %s=%q", spec.StrName, r.Str)
		}
	} else {
		out += fmt.Sprintf(" major=0x%x minor=0x%x", r.Major, r.Minor)
		for _, v := range r.Fixed {
			out += fmt.Sprintf(" 0x%x", v)
		}
		if r.Layout == LayoutString || r.Layout == LayoutBytes {
			out += fmt.Sprintf(" str=%q", r.Str)
		}
	}
	return out
}

func fmtTime(t uint64) string {
	return fmt.Sprintf("%d.%09d", t/1e9, t%1e9)
}
