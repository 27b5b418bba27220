package pprofloc

import (
	"bufio"
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"io"
)

// Stream writes a gzipped pprof profile (profile.proto) sample by sample:
// a sample's stack is encoded as it is given and not kept, so a call
// tree's profile costs memory for its functions and strings only, not for
// the sum of its stacks' depths (a recursion 10,000 deep has 10,000
// stacks averaging 5,000 frames). The functions, locations and string
// table follow the samples (protobuf fields may come in any order), each
// function with one location, as Table gives them.
type Stream struct {
	gz      *gzip.Writer
	w       *bufio.Writer
	strs    map[string]int64
	strList []string
	funcs   []streamFunc
	locs    map[string]uint64
	nvals   int
	buf     []byte
	err     error
}

type streamFunc struct {
	name, file int64
	line       int64
}

// ValueType is a sample type or the period type: its type and unit.
type ValueType struct{ Type, Unit string }

// Label is a sample's label: a string (Str) or a number (Num, when Str is "").
type Label struct {
	Key, Str string
	Num      int64
}

// Protobuf field numbers of profile.proto.
const (
	fProfileSampleType = 1
	fProfileSample     = 2
	fProfileLocation   = 4
	fProfileFunction   = 5
	fProfileStrings    = 6
	fProfilePeriodType = 11
	fProfilePeriod     = 12

	fSampleLocation = 1
	fSampleValue    = 2
	fSampleLabel    = 3

	fLabelKey = 1
	fLabelStr = 2
	fLabelNum = 3

	fLocationID   = 1
	fLocationLine = 4
	fLineFunction = 1

	fFunctionID       = 1
	fFunctionName     = 2
	fFunctionSysName  = 3
	fFunctionFilename = 4
	fFunctionStart    = 5

	fValueTypeType = 1
	fValueTypeUnit = 2

	wireVarint = 0
	wireBytes  = 2
)

// NewStream starts a profile with these sample types, written gzipped to out.
func NewStream(out io.Writer, sampleTypes []ValueType, period ValueType, every int64) *Stream {
	s := &Stream{strs: map[string]int64{}, locs: map[string]uint64{}, nvals: len(sampleTypes)}
	s.gz = gzip.NewWriter(out)
	s.w = bufio.NewWriterSize(s.gz, 256<<10)
	s.str("")
	for _, t := range sampleTypes {
		s.valueType(fProfileSampleType, t)
	}
	s.valueType(fProfilePeriodType, period)
	s.put(appendTag(s.buf[:0], fProfilePeriod, wireVarint), uint64(every))
	return s
}

func appendTag(b []byte, field, wire int) []byte {
	return binary.AppendUvarint(b, uint64(field)<<3|uint64(wire))
}

func (s *Stream) put(b []byte, v uint64) {
	b = binary.AppendUvarint(b, v)
	s.write(b)
	s.buf = b
}

func (s *Stream) write(b []byte) {
	if s.err == nil {
		_, s.err = s.w.Write(b)
	}
}

func (s *Stream) str(v string) int64 {
	if i, ok := s.strs[v]; ok {
		return i
	}
	i := int64(len(s.strList))
	s.strs[v] = i
	s.strList = append(s.strList, v)
	return i
}

func (s *Stream) valueType(field int, t ValueType) {
	var m []byte
	m = binary.AppendUvarint(appendTag(m, fValueTypeType, wireVarint), uint64(s.str(t.Type)))
	m = binary.AppendUvarint(appendTag(m, fValueTypeUnit, wireVarint), uint64(s.str(t.Unit)))
	b := binary.AppendUvarint(appendTag(s.buf[:0], field, wireBytes), uint64(len(m)))
	s.write(append(b, m...))
}

// Loc returns the location ID of key, named name (with its source file
// and first line when file is not ""), made the first time key is seen.
func (s *Stream) Loc(key, name, file string, line int64) uint64 {
	if id, ok := s.locs[key]; ok {
		return id
	}
	s.funcs = append(s.funcs, streamFunc{name: s.str(name), file: s.str(file), line: line})
	id := uint64(len(s.funcs))
	s.locs[key] = id
	return id
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

// Sample writes one sample: its stack of location IDs given root first
// (written leaf first, as pprof wants them), a value per sample type and
// its labels.
func (s *Stream) Sample(rootFirst []uint64, values []int64, labels ...Label) {
	if len(values) != s.nvals && s.err == nil {
		s.err = fmt.Errorf("pprof sample with %d values, %d sample types", len(values), s.nvals)
	}
	locLen := 0
	for _, id := range rootFirst {
		locLen += uvarintLen(id)
	}
	valLen := 0
	for _, v := range values {
		valLen += uvarintLen(uint64(v))
	}
	var lab []byte
	for _, l := range labels {
		var m []byte
		m = binary.AppendUvarint(appendTag(m, fLabelKey, wireVarint), uint64(s.str(l.Key)))
		if l.Str != "" {
			m = binary.AppendUvarint(appendTag(m, fLabelStr, wireVarint), uint64(s.str(l.Str)))
		} else {
			m = binary.AppendUvarint(appendTag(m, fLabelNum, wireVarint), uint64(l.Num))
		}
		lab = binary.AppendUvarint(appendTag(lab, fSampleLabel, wireBytes), uint64(len(m)))
		lab = append(lab, m...)
	}
	size := 0
	if len(rootFirst) > 0 {
		size += 1 + uvarintLen(uint64(locLen)) + locLen
	}
	if len(values) > 0 {
		size += 1 + uvarintLen(uint64(valLen)) + valLen
	}
	size += len(lab)
	b := binary.AppendUvarint(appendTag(s.buf[:0], fProfileSample, wireBytes), uint64(size))
	if len(rootFirst) > 0 {
		b = binary.AppendUvarint(appendTag(b, fSampleLocation, wireBytes), uint64(locLen))
		for i := len(rootFirst) - 1; i >= 0; i-- {
			b = binary.AppendUvarint(b, rootFirst[i])
			if len(b) >= 64<<10 {
				s.write(b)
				b = b[:0]
			}
		}
	}
	if len(values) > 0 {
		b = binary.AppendUvarint(appendTag(b, fSampleValue, wireBytes), uint64(valLen))
		for _, v := range values {
			b = binary.AppendUvarint(b, uint64(v))
		}
	}
	b = append(b, lab...)
	s.write(b)
	s.buf = b[:0]
}

// Close writes the functions, locations and strings and ends the gzip
// stream (not out).
func (s *Stream) Close() error {
	for i, f := range s.funcs {
		id := uint64(i + 1)
		var m []byte
		m = binary.AppendUvarint(appendTag(m, fFunctionID, wireVarint), id)
		m = binary.AppendUvarint(appendTag(m, fFunctionName, wireVarint), uint64(f.name))
		m = binary.AppendUvarint(appendTag(m, fFunctionSysName, wireVarint), uint64(f.name))
		if f.file != 0 {
			m = binary.AppendUvarint(appendTag(m, fFunctionFilename, wireVarint), uint64(f.file))
			m = binary.AppendUvarint(appendTag(m, fFunctionStart, wireVarint), uint64(f.line))
		}
		b := binary.AppendUvarint(appendTag(s.buf[:0], fProfileFunction, wireBytes), uint64(len(m)))
		s.write(append(b, m...))

		var line []byte
		line = binary.AppendUvarint(appendTag(line, fLineFunction, wireVarint), id)
		m = binary.AppendUvarint(appendTag(m[:0], fLocationID, wireVarint), id)
		m = binary.AppendUvarint(appendTag(m, fLocationLine, wireBytes), uint64(len(line)))
		m = append(m, line...)
		b = binary.AppendUvarint(appendTag(s.buf[:0], fProfileLocation, wireBytes), uint64(len(m)))
		s.write(append(b, m...))
	}
	for _, v := range s.strList {
		b := binary.AppendUvarint(appendTag(s.buf[:0], fProfileStrings, wireBytes), uint64(len(v)))
		s.write(append(b, v...))
	}
	if s.err == nil {
		s.err = s.w.Flush()
	}
	if err := s.gz.Close(); s.err == nil {
		s.err = err
	}
	if s.err != nil {
		return fmt.Errorf("writing the pprof profile: %w", s.err)
	}
	return nil
}
