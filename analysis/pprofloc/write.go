package pprofloc

import (
	"bufio"
	"compress/gzip"
	"io"
	"slices"

	"github.com/google/pprof/profile"
)

// Write writes p as profile.Write does (profile.proto, gzipped), encoded
// here: in one pass with a string table by map, where profile.Write
// first copies every sample's and location's ids into new slices
// (preEncode), and at gzip's best speed rather than its default level,
// which on a profile with a location per address was most of the
// writing, for files a tenth smaller. p must be valid (CheckValid).
func Write(p *profile.Profile, out io.Writer) error {
	zw, err := gzip.NewWriterLevel(out, gzip.BestSpeed)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(zw, 1<<16)
	e := &encoder{w: bw, strs: map[string]int64{"": 0}, table: []string{""}}
	e.profile(p)
	if err := bw.Flush(); err != nil {
		zw.Close()
		return err
	}
	return zw.Close()
}

// encoder writes one profile's messages; a message is built in msg
// (nested ones in sub) and written with its length.
type encoder struct {
	w     *bufio.Writer
	msg   []byte
	sub   []byte
	strs  map[string]int64
	table []string
}

func (e *encoder) str(s string) int64 {
	if i, ok := e.strs[s]; ok {
		return i
	}
	i := int64(len(e.table))
	e.strs[s] = i
	e.table = append(e.table, s)
	return i
}

func appendVarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

// field appends a varint field (zero: left out, as proto3 does).
func field(b []byte, num int, v uint64) []byte {
	if v == 0 {
		return b
	}
	return appendVarint(appendVarint(b, uint64(num)<<3), v)
}

func boolField(b []byte, num int, v bool) []byte {
	if !v {
		return b
	}
	return field(b, num, 1)
}

// bytesField appends a length-delimited field.
func bytesField(b []byte, num int, v []byte) []byte {
	b = appendVarint(b, uint64(num)<<3|2)
	b = appendVarint(b, uint64(len(v)))
	return append(b, v...)
}

// packed appends a packed repeated varint field.
func packed[T int64 | uint64](b []byte, num int, vs []T) []byte {
	if len(vs) == 0 {
		return b
	}
	n := 0
	for _, v := range vs {
		for u := uint64(v); ; u >>= 7 {
			n++
			if u < 0x80 {
				break
			}
		}
	}
	b = appendVarint(b, uint64(num)<<3|2)
	b = appendVarint(b, uint64(n))
	for _, v := range vs {
		b = appendVarint(b, uint64(v))
	}
	return b
}

// emit writes the message in e.msg as field num of the profile.
func (e *encoder) emit(num int) {
	var hdr [20]byte
	h := appendVarint(hdr[:0], uint64(num)<<3|2)
	h = appendVarint(h, uint64(len(e.msg)))
	e.w.Write(h)
	e.w.Write(e.msg)
	e.msg = e.msg[:0]
}

func (e *encoder) valueType(num int, vt *profile.ValueType) {
	e.msg = field(field(e.msg[:0], 1, uint64(e.str(vt.Type))), 2, uint64(e.str(vt.Unit)))
	e.emit(num)
}

func (e *encoder) profile(p *profile.Profile) {
	for _, st := range p.SampleType {
		e.valueType(1, st)
	}
	var locs []uint64
	var keys []string
	for _, s := range p.Sample {
		locs = locs[:0]
		for _, l := range s.Location {
			locs = append(locs, l.ID)
		}
		e.msg = packed(e.msg[:0], 1, locs)
		e.msg = packed(e.msg, 2, s.Value)
		keys = keys[:0]
		for k := range s.Label {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			for _, v := range s.Label[k] {
				e.sub = field(field(e.sub[:0], 1, uint64(e.str(k))), 2, uint64(e.str(v)))
				e.msg = bytesField(e.msg, 3, e.sub)
			}
		}
		keys = keys[:0]
		for k := range s.NumLabel {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			units := s.NumUnit[k]
			for i, v := range s.NumLabel[k] {
				e.sub = field(field(e.sub[:0], 1, uint64(e.str(k))), 3, uint64(v))
				if i < len(units) {
					e.sub = field(e.sub, 4, uint64(e.str(units[i])))
				}
				e.msg = bytesField(e.msg, 3, e.sub)
			}
		}
		e.emit(2)
	}
	for _, m := range p.Mapping {
		b := field(e.msg[:0], 1, m.ID)
		b = field(b, 2, m.Start)
		b = field(b, 3, m.Limit)
		b = field(b, 4, m.Offset)
		b = field(b, 5, uint64(e.str(m.File)))
		b = field(b, 6, uint64(e.str(m.BuildID)))
		b = boolField(b, 7, m.HasFunctions)
		b = boolField(b, 8, m.HasFilenames)
		b = boolField(b, 9, m.HasLineNumbers)
		e.msg = boolField(b, 10, m.HasInlineFrames)
		e.emit(3)
	}
	for _, l := range p.Location {
		b := field(e.msg[:0], 1, l.ID)
		if l.Mapping != nil {
			b = field(b, 2, l.Mapping.ID)
		}
		b = field(b, 3, l.Address)
		for _, ln := range l.Line {
			e.sub = e.sub[:0]
			if ln.Function != nil {
				e.sub = field(e.sub, 1, ln.Function.ID)
			}
			e.sub = field(field(e.sub, 2, uint64(ln.Line)), 3, uint64(ln.Column))
			b = bytesField(b, 4, e.sub)
		}
		e.msg = boolField(b, 5, l.IsFolded)
		e.emit(4)
	}
	for _, f := range p.Function {
		b := field(e.msg[:0], 1, f.ID)
		b = field(b, 2, uint64(e.str(f.Name)))
		b = field(b, 3, uint64(e.str(f.SystemName)))
		b = field(b, 4, uint64(e.str(f.Filename)))
		e.msg = field(b, 5, uint64(f.StartLine))
		e.emit(5)
	}
	// the profile's own fields after its messages: their strings go in
	// the table, which comes last here (a field's order is free)
	var tail []byte
	tail = field(tail, 7, uint64(e.str(p.DropFrames)))
	tail = field(tail, 8, uint64(e.str(p.KeepFrames)))
	tail = field(tail, 9, uint64(p.TimeNanos))
	tail = field(tail, 10, uint64(p.DurationNanos))
	if p.PeriodType != nil {
		e.sub = field(field(e.sub[:0], 1, uint64(e.str(p.PeriodType.Type))), 2, uint64(e.str(p.PeriodType.Unit)))
		tail = bytesField(tail, 11, e.sub)
	}
	tail = field(tail, 12, uint64(p.Period))
	for _, c := range p.Comments {
		tail = appendVarint(appendVarint(tail, 13<<3), uint64(e.str(c)))
	}
	tail = field(tail, 14, uint64(e.str(p.DefaultSampleType)))
	tail = field(tail, 15, uint64(e.str(p.DocURL)))
	e.w.Write(tail)
	for _, s := range e.table {
		e.msg = bytesField(e.msg[:0], 6, []byte(s))
		e.w.Write(e.msg)
	}
}
