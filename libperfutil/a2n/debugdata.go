package a2n

import (
	"bytes"
	"debug/elf"
	"fmt"
	"io"

	// The standard library has no xz decoder (compress/ holds gzip,
	// bzip2, flate, lzw, zlib); MiniDebugInfo is xz by definition.
	"github.com/ulikunitz/xz"
)

// miniDebugInfo returns the ELF file held xz-compressed in f's
// .gnu_debugdata section (MiniDebugInfo, as Fedora and others ship: a
// .symtab of the functions .dynsym lacks), or nil. The decompressed size
// is capped: the section is untrusted input.
func miniDebugInfo(f *elf.File) (*elf.File, error) {
	sec := f.Section(".gnu_debugdata")
	if sec == nil || sec.Type == elf.SHT_NOBITS {
		return nil, nil
	}
	zr, err := xz.NewReader(sec.Open())
	if err != nil {
		return nil, fmt.Errorf(".gnu_debugdata: %w", err)
	}
	b, err := io.ReadAll(io.LimitReader(zr, MaxDebugData+1))
	if err != nil {
		return nil, fmt.Errorf(".gnu_debugdata: %w", err)
	}
	if int64(len(b)) > MaxDebugData {
		return nil, fmt.Errorf(".gnu_debugdata: decompresses to more than %d bytes, ignored", MaxDebugData)
	}
	mf, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf(".gnu_debugdata: %w", err)
	}
	return mf, nil
}
