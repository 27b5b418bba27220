package a2n

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"

	// The standard library has no xz decoder (compress/ holds gzip,
	// bzip2, flate, lzw, zlib); MiniDebugInfo is xz by definition.
	"github.com/ulikunitz/xz"
)

// miniDebugInfo returns the ELF file held xz-compressed in f's
// .gnu_debugdata section (MiniDebugInfo, as Fedora and others ship: a
// .symtab of the functions .dynsym lacks), or nil. The section is
// untrusted input, a few kilobytes of which can decompress to gigabytes:
// the size its xz index declares is checked before anything is
// decompressed, the decompression stops at that size (an index that lies
// is refused at that point), and a refusal is remembered for the file's
// identity ident ("": not remembered), so the same file is not
// decompressed again under another path or by a later load.
func miniDebugInfo(f *elf.File, ident string) (*elf.File, error) {
	sec := f.Section(".gnu_debugdata")
	if sec == nil || sec.Type == elf.SHT_NOBITS {
		return nil, nil
	}
	if ident != "" {
		if err, ok := debugDataRefused.Load(ident); ok {
			return nil, err.(error)
		}
	}
	mf, err := readMiniDebugInfo(sec)
	if err != nil && ident != "" {
		debugDataRefused.Store(ident, err)
	}
	return mf, err
}

// debugDataRefused maps a module file's identity (fileIdent) to why its
// .gnu_debugdata was refused.
var debugDataRefused sync.Map

func readMiniDebugInfo(sec *elf.Section) (*elf.File, error) {
	size, err := xzDeclaredSize(sec, int64(sec.Size))
	if err != nil {
		return nil, fmt.Errorf(".gnu_debugdata: %w, ignored", err)
	}
	if size > uint64(MaxDebugData) {
		return nil, fmt.Errorf(".gnu_debugdata: its xz index declares %d bytes, more than the %d-byte limit, ignored", size, MaxDebugData)
	}
	zr, err := xz.NewReader(sec.Open())
	if err != nil {
		return nil, fmt.Errorf(".gnu_debugdata: %w", err)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(zr, b); err != nil {
		return nil, fmt.Errorf(".gnu_debugdata: %w (its xz index declares %d bytes), ignored", err, size)
	}
	var one [1]byte
	if n, _ := zr.Read(one[:]); n > 0 {
		return nil, fmt.Errorf(".gnu_debugdata: decompresses to more than the %d bytes its xz index declares, ignored", size)
	}
	mf, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf(".gnu_debugdata: %w", err)
	}
	return mf, nil
}

// maxXZIndex bounds an xz index read (a MiniDebugInfo has a few blocks;
// each index record is at most 18 bytes).
const maxXZIndex = 1 << 20

var (
	xzHeaderMagic = []byte{0xfd, '7', 'z', 'X', 'Z', 0}
	errXZ         = errors.New("not a well-formed xz stream")
)

// xzDeclaredSize is the uncompressed size the index of each stream of the
// xz data in r (size bytes) declares, read from the end: stream footer,
// index, the blocks it sizes and the stream header, stream after stream
// (with the zero padding allowed between them). Nothing is decompressed.
func xzDeclaredSize(r io.ReaderAt, size int64) (uint64, error) {
	var total uint64
	pos := size
	streams := 0
	for pos > 0 {
		var pad [4]byte
		if _, err := r.ReadAt(pad[:], pos-4); err != nil || pos < 4 {
			return 0, errXZ
		}
		if pad == [4]byte{} { // stream padding
			pos -= 4
			continue
		}
		if pos < 24 {
			return 0, errXZ
		}
		var foot [12]byte
		if _, err := r.ReadAt(foot[:], pos-12); err != nil || foot[10] != 'Y' || foot[11] != 'Z' {
			return 0, errXZ
		}
		idxLen := (int64(binary.LittleEndian.Uint32(foot[4:8])) + 1) * 4
		idxStart := pos - 12 - idxLen
		if idxLen > maxXZIndex || idxStart < 12 {
			return 0, errXZ
		}
		idx := make([]byte, idxLen)
		if _, err := r.ReadAt(idx, idxStart); err != nil || idx[0] != 0 {
			return 0, errXZ
		}
		rest := idx[1:]
		next := func() (uint64, bool) {
			v, n := binary.Uvarint(rest)
			if n <= 0 {
				return 0, false
			}
			rest = rest[n:]
			return v, true
		}
		n, ok := next()
		if !ok || n > uint64(len(rest)) {
			return 0, errXZ
		}
		var blocks uint64
		for i := uint64(0); i < n; i++ {
			unpadded, ok1 := next()
			uncompressed, ok2 := next()
			if !ok1 || !ok2 || unpadded == 0 || unpadded > uint64(size) || uncompressed > 1<<62-total {
				return 0, errXZ
			}
			blocks += (unpadded + 3) &^ 3
			total += uncompressed
			if blocks > uint64(size) {
				return 0, errXZ
			}
		}
		start := idxStart - int64(blocks) - 12
		var head [6]byte
		if start < 0 {
			return 0, errXZ
		}
		if _, err := r.ReadAt(head[:], start); err != nil || !bytes.Equal(head[:], xzHeaderMagic) {
			return 0, errXZ
		}
		pos = start
		if streams++; streams > 1024 {
			return 0, errXZ
		}
	}
	if streams == 0 {
		return 0, errXZ
	}
	return total, nil
}
