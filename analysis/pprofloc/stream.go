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
// stacks averaging 5,000 frames). The mappings, functions, locations and
// string table follow the samples (protobuf fields may come in any
// order). Loc gives each function one location, as Table does; Mapping,
// Func and AddrLoc give a function locations at addresses of a mapping,
// each with its source line.
type Stream struct {
	gz       *gzip.Writer
	w        *bufio.Writer
	strs     map[string]int64
	strList  []string
	funcs    []streamFunc
	funcIDs  map[string]uint64
	locList  []streamLoc
	locs     map[string]uint64
	addrLocs map[addrLocKey]uint64
	maps     []streamMapping
	mapIDs   map[streamMapping]uint64
	nvals    int
	buf      []byte
	err      error
}

type streamFunc struct {
	name, file int64
	line       int64
}

// streamLoc is a location: its function, mapping, address and line.
type streamLoc struct {
	fn, mapping, addr uint64
	line              int64
}

type addrLocKey struct {
	mapping, addr, fn uint64
	line              int64
}

// streamMapping is a mapping: its range, file offset, file and build id
// (string table indexes).
type streamMapping struct {
	start, limit, offset uint64
	file, buildID        int64
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

	fProfileMapping = 3

	fMappingID        = 1
	fMappingStart     = 2
	fMappingLimit     = 3
	fMappingOffset    = 4
	fMappingFilename  = 5
	fMappingBuildID   = 6
	fMappingFunctions = 7
	fMappingFilenames = 8
	fMappingLines     = 9

	fLocationID      = 1
	fLocationMapping = 2
	fLocationAddress = 3
	fLocationLine    = 4
	fLineFunction    = 1
	fLineLine        = 2

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
	s := &Stream{strs: map[string]int64{}, funcIDs: map[string]uint64{}, locs: map[string]uint64{}, addrLocs: map[addrLocKey]uint64{},
		mapIDs: map[streamMapping]uint64{}, nvals: len(sampleTypes)}
	// BestSpeed, as Write: the profile of a call flow of tens of millions
	// of calls is written at a program's end, which waits for it
	s.gz, _ = gzip.NewWriterLevel(out, gzip.BestSpeed) // (the level is valid)
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
	s.locList = append(s.locList, streamLoc{fn: s.Func(key, name, file, line)})
	id := uint64(len(s.locList))
	s.locs[key] = id
	return id
}

// Func returns the function ID of key, named name (with its source file
// and first line when file is not ""), made the first time key is seen.
// Loc's key names its function too.
func (s *Stream) Func(key, name, file string, line int64) uint64 {
	if id, ok := s.funcIDs[key]; ok {
		return id
	}
	s.funcs = append(s.funcs, streamFunc{name: s.str(name), file: s.str(file), line: line})
	id := uint64(len(s.funcs))
	s.funcIDs[key] = id
	return id
}

// Mapping returns the ID of the mapping of file (with its build id, ""
// when not known) from start to limit, start being at offset in the
// file, made the first time it is seen.
func (s *Stream) Mapping(file, buildID string, start, limit, offset uint64) uint64 {
	k := streamMapping{start: start, limit: limit, offset: offset, file: s.str(file), buildID: s.str(buildID)}
	if id, ok := s.mapIDs[k]; ok {
		return id
	}
	s.maps = append(s.maps, k)
	id := uint64(len(s.maps))
	s.mapIDs[k] = id
	return id
}

// AddrLoc returns the ID of the location at addr of a mapping (a Mapping
// ID; 0: none) in function fn (a Func ID) at source line line (0: not
// known), made the first time it is seen.
func (s *Stream) AddrLoc(mapping, addr, fn uint64, line int64) uint64 {
	k := addrLocKey{mapping: mapping, addr: addr, fn: fn, line: line}
	if id, ok := s.addrLocs[k]; ok {
		return id
	}
	s.locList = append(s.locList, streamLoc{fn: fn, mapping: mapping, addr: addr, line: line})
	id := uint64(len(s.locList))
	s.addrLocs[k] = id
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

// Close writes the mappings, functions, locations and strings and ends
// the gzip stream (not out).
func (s *Stream) Close() error {
	var m []byte
	for i, mp := range s.maps {
		m = binary.AppendUvarint(appendTag(m[:0], fMappingID, wireVarint), uint64(i+1))
		for _, f := range [...]struct {
			num int
			v   uint64
		}{{fMappingStart, mp.start}, {fMappingLimit, mp.limit}, {fMappingOffset, mp.offset}, {fMappingFilename, uint64(mp.file)},
			{fMappingBuildID, uint64(mp.buildID)}, {fMappingFunctions, 1}, {fMappingFilenames, 1}, {fMappingLines, 1}} {
			if f.v != 0 {
				m = binary.AppendUvarint(appendTag(m, f.num, wireVarint), f.v)
			}
		}
		b := binary.AppendUvarint(appendTag(s.buf[:0], fProfileMapping, wireBytes), uint64(len(m)))
		s.write(append(b, m...))
	}
	// a function, then a location: with Loc alone, function and
	// location i name each other
	for i := 0; i < max(len(s.funcs), len(s.locList)); i++ {
		if i < len(s.funcs) {
			f := s.funcs[i]
			m = binary.AppendUvarint(appendTag(m[:0], fFunctionID, wireVarint), uint64(i+1))
			m = binary.AppendUvarint(appendTag(m, fFunctionName, wireVarint), uint64(f.name))
			m = binary.AppendUvarint(appendTag(m, fFunctionSysName, wireVarint), uint64(f.name))
			if f.file != 0 {
				m = binary.AppendUvarint(appendTag(m, fFunctionFilename, wireVarint), uint64(f.file))
				m = binary.AppendUvarint(appendTag(m, fFunctionStart, wireVarint), uint64(f.line))
			}
			b := binary.AppendUvarint(appendTag(s.buf[:0], fProfileFunction, wireBytes), uint64(len(m)))
			s.write(append(b, m...))
		}
		if i < len(s.locList) {
			l := s.locList[i]
			var line []byte
			line = binary.AppendUvarint(appendTag(line, fLineFunction, wireVarint), l.fn)
			if l.line != 0 {
				line = binary.AppendUvarint(appendTag(line, fLineLine, wireVarint), uint64(l.line))
			}
			m = binary.AppendUvarint(appendTag(m[:0], fLocationID, wireVarint), uint64(i+1))
			if l.mapping != 0 {
				m = binary.AppendUvarint(appendTag(m, fLocationMapping, wireVarint), l.mapping)
			}
			if l.addr != 0 {
				m = binary.AppendUvarint(appendTag(m, fLocationAddress, wireVarint), l.addr)
			}
			m = binary.AppendUvarint(appendTag(m, fLocationLine, wireBytes), uint64(len(line)))
			m = append(m, line...)
			b := binary.AppendUvarint(appendTag(s.buf[:0], fProfileLocation, wireBytes), uint64(len(m)))
			s.write(append(b, m...))
		}
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
