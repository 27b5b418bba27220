// Package nrm2 holds the swtrace.nrm2 trace file: a fixed header followed by
// chunks of per-CPU MTE and trace data, per-CPU statistics and the kernel
// symbol table captured at trace start. docs/trace-format.md documents it
// byte by byte so that other tools can read it.
package nrm2

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// Magic starts every file.
var Magic = [8]byte{'P', 'I', 'N', 'R', 'M', '2', 0, 0}

// Version of the file layout.
const Version = 1

// HeaderSize is the size of the fixed header in bytes.
const HeaderSize = 224

// Modes.
const (
	ModeNormal = 0
	ModeWrap   = 1
	ModeCont   = 2
)

// ModeName names a mode.
func ModeName(m uint32) string {
	switch m {
	case ModeNormal:
		return "normal"
	case ModeWrap:
		return "wrap"
	case ModeCont:
		return "cont"
	}
	return fmt.Sprintf("mode-%d", m)
}

// Header flags.
const (
	FlagBufferFull = 1 << 0 // normal mode: tracing stopped because a buffer filled
	FlagLost       = 1 << 1 // some records were lost (see the CPU statistics)
	FlagComplete   = 1 << 2 // the file was finalized (statistics and END chunk written)
)

// Backends.
const (
	BackendDaemon = 0
	BackendKmod   = 1
)

// ClockMonotonic is the clock id of time stamps (CLOCK_MONOTONIC, ns).
const ClockMonotonic = 1

// Header is the fixed file header.
type Header struct {
	Version       uint32
	NCPUs         uint32
	Mode          uint32
	TraceBufSize  uint64 // per CPU, bytes
	MTEBufSize    uint64 // per CPU, bytes
	ClockID       uint32
	Flags         uint32
	ClockHz       uint64
	StartWallNs   uint64 // wall time at trace on, ns since the Unix epoch
	StartClockNs  uint64 // clock value at trace on
	SegmentSize   uint64
	Backend       uint32
	RateHz        uint32
	KernelRelease string // up to 64 bytes
	Hostname      string // up to 64 bytes
}

// Chunk kinds.
const (
	ChunkTrace    = 1 // records from a CPU's trace buffer
	ChunkMTE      = 2 // records from a CPU's MTE buffer
	ChunkStats    = 3 // CPUStats of one CPU
	ChunkKallsyms = 4 // /proc/kallsyms text captured at trace on
	ChunkEnd      = 5 // the file is complete
)

// ChunkHeaderSize is the size of a chunk header.
const ChunkHeaderSize = 16

// CPUStats are the per-CPU counts recorded in a ChunkStats chunk.
type CPUStats struct {
	Records    uint64 // trace records written
	Lost       uint64 // trace records lost
	MTERecords uint64
	MTELost    uint64
	Bytes      uint64 // trace bytes written
	Full       uint32 // 1: the trace buffer filled (normal mode); 2: the MTE buffer did
	_          uint32
}

// StatsSize is the encoded size of CPUStats.
const StatsSize = 48

func (s *CPUStats) encode() []byte {
	b := make([]byte, StatsSize)
	binary.LittleEndian.PutUint64(b[0:], s.Records)
	binary.LittleEndian.PutUint64(b[8:], s.Lost)
	binary.LittleEndian.PutUint64(b[16:], s.MTERecords)
	binary.LittleEndian.PutUint64(b[24:], s.MTELost)
	binary.LittleEndian.PutUint64(b[32:], s.Bytes)
	binary.LittleEndian.PutUint32(b[40:], s.Full)
	return b
}

func decodeStats(b []byte) CPUStats {
	return CPUStats{
		Records:    binary.LittleEndian.Uint64(b[0:]),
		Lost:       binary.LittleEndian.Uint64(b[8:]),
		MTERecords: binary.LittleEndian.Uint64(b[16:]),
		MTELost:    binary.LittleEndian.Uint64(b[24:]),
		Bytes:      binary.LittleEndian.Uint64(b[32:]),
		Full:       binary.LittleEndian.Uint32(b[40:]),
	}
}

func putStr(b []byte, s string) {
	if len(s) > len(b)-1 {
		s = s[:len(b)-1]
	}
	copy(b, s)
}

func getStr(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// Encode returns the header's bytes.
func (h *Header) Encode() []byte {
	b := make([]byte, HeaderSize)
	copy(b, Magic[:])
	binary.LittleEndian.PutUint32(b[8:], Version)
	binary.LittleEndian.PutUint32(b[12:], HeaderSize)
	binary.LittleEndian.PutUint32(b[16:], h.NCPUs)
	binary.LittleEndian.PutUint32(b[20:], h.Mode)
	binary.LittleEndian.PutUint64(b[24:], h.TraceBufSize)
	binary.LittleEndian.PutUint64(b[32:], h.MTEBufSize)
	binary.LittleEndian.PutUint32(b[40:], h.ClockID)
	binary.LittleEndian.PutUint32(b[44:], h.Flags)
	binary.LittleEndian.PutUint64(b[48:], h.ClockHz)
	binary.LittleEndian.PutUint64(b[56:], h.StartWallNs)
	binary.LittleEndian.PutUint64(b[64:], h.StartClockNs)
	binary.LittleEndian.PutUint64(b[72:], h.SegmentSize)
	binary.LittleEndian.PutUint32(b[80:], h.Backend)
	binary.LittleEndian.PutUint32(b[84:], h.RateHz)
	putStr(b[88:153], h.KernelRelease)
	putStr(b[153:218], h.Hostname)
	return b
}

// FormatError reports a malformed file with the byte offset of the problem.
type FormatError struct {
	Path   string
	Offset int64
	Msg    string
}

func (e *FormatError) Error() string {
	p := e.Path
	if p == "" {
		p = "trace file"
	}
	return fmt.Sprintf("%s: byte offset %d: %s", p, e.Offset, e.Msg)
}

// DecodeHeader parses the fixed header.
func DecodeHeader(b []byte) (Header, error) {
	var h Header
	if len(b) < 8 || !bytes.Equal(b[:8], Magic[:]) {
		return h, &FormatError{Offset: 0, Msg: "not a perfinsp trace file (bad magic; expected \"PINRM2\")"}
	}
	if len(b) < HeaderSize {
		return h, &FormatError{Offset: int64(len(b)), Msg: fmt.Sprintf("truncated header: %d of %d bytes", len(b), HeaderSize)}
	}
	h.Version = binary.LittleEndian.Uint32(b[8:])
	if h.Version != Version {
		return h, &FormatError{Offset: 8, Msg: fmt.Sprintf("unsupported file version %d (this post reads version %d)", h.Version, Version)}
	}
	if hs := binary.LittleEndian.Uint32(b[12:]); hs != HeaderSize {
		return h, &FormatError{Offset: 12, Msg: fmt.Sprintf("header size %d, expected %d", hs, HeaderSize)}
	}
	h.NCPUs = binary.LittleEndian.Uint32(b[16:])
	h.Mode = binary.LittleEndian.Uint32(b[20:])
	h.TraceBufSize = binary.LittleEndian.Uint64(b[24:])
	h.MTEBufSize = binary.LittleEndian.Uint64(b[32:])
	h.ClockID = binary.LittleEndian.Uint32(b[40:])
	h.Flags = binary.LittleEndian.Uint32(b[44:])
	h.ClockHz = binary.LittleEndian.Uint64(b[48:])
	h.StartWallNs = binary.LittleEndian.Uint64(b[56:])
	h.StartClockNs = binary.LittleEndian.Uint64(b[64:])
	h.SegmentSize = binary.LittleEndian.Uint64(b[72:])
	h.Backend = binary.LittleEndian.Uint32(b[80:])
	h.RateHz = binary.LittleEndian.Uint32(b[84:])
	h.KernelRelease = getStr(b[88:153])
	h.Hostname = getStr(b[153:218])
	if h.NCPUs == 0 || h.NCPUs > 8192 {
		return h, &FormatError{Offset: 16, Msg: fmt.Sprintf("implausible CPU count %d", h.NCPUs)}
	}
	return h, nil
}
