package continuous

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"os"
	"slices"

	"perfinsp/analysis/a2n"
)

// ksyms names kernel addresses: the text symbols of /proc/kallsyms in a
// compact table (16 bytes a symbol, the names packed in chunks), read
// once per name-table period. It is about half what a table of Go strings
// over the whole file costs, and the file is streamed, never held whole.
type ksyms struct {
	ents   []ksym
	chunks [][]byte // the names, ksymChunk bytes each at most
	mods   []string // kernel module names ([name])
}

type ksym struct {
	addr uint64
	ref  uint32 // chunk<<16 | offset of the name
	n    uint16 // the name's length
	mod  uint16 // 0: the kernel itself, else mods[mod-1]
}

const ksymChunk = 1 << 16

// maxKsyms bounds the table (a distribution kernel with its modules has
// a few hundred thousand text symbols).
const maxKsyms = 4 << 20

// loadKsyms reads the kernel's symbols from r (/proc/kallsyms's format).
// Lines it does not understand are skipped; addresses shown as zero
// (kptr_restrict) give an empty table, whose addresses are named
// [kernel]+0xADDR.
func loadKsyms(r io.Reader, sizeHint int) *ksyms {
	k := &ksyms{ents: make([]ksym, 0, sizeHint)}
	modIndex := map[string]uint16{}
	sc := bufio.NewScanner(bufio.NewReaderSize(r, 64<<10))
	sc.Buffer(make([]byte, 0, 4096), 4096)
	var chunk []byte
	for sc.Scan() && len(k.ents) < maxKsyms {
		line := sc.Bytes()
		addr, name, m, inMod, ok := a2n.KsymLine(line)
		if !ok {
			continue
		}
		var mod uint16
		if inMod {
			if mod = modIndex[string(m)]; mod == 0 && len(k.mods) < 0xffff {
				ms := string(m)
				k.mods = append(k.mods, ms)
				mod = uint16(len(k.mods))
				modIndex[ms] = mod
			}
		}
		if len(name) == 0 || len(name) > 0xffff {
			continue
		}
		if len(chunk)+len(name) > ksymChunk {
			chunk = nil
		}
		if chunk == nil {
			chunk = make([]byte, 0, ksymChunk)
			k.chunks = append(k.chunks, chunk)
		}
		ref := uint32(len(k.chunks)-1)<<16 | uint32(len(chunk))
		chunk = append(chunk, name...)
		k.chunks[len(k.chunks)-1] = chunk
		k.ents = append(k.ents, ksym{addr: addr, ref: ref, n: uint16(len(name)), mod: mod})
	}
	// kallsyms lists the kernel by address, then each module's symbols:
	// sorted, the first listed of an address wins (a stable sort).
	slices.SortStableFunc(k.ents, func(a, b ksym) int { return cmp.Compare(a.addr, b.addr) })
	k.ents = slices.CompactFunc(k.ents, func(a, b ksym) bool { return a.addr == b.addr })
	k.ents = slices.Clip(k.ents)
	return k
}

// readKsyms reads /proc/kallsyms (an empty table if it cannot be read).
func readKsyms(sizeHint int) *ksyms {
	f, err := os.Open("/proc/kallsyms")
	if err != nil {
		return &ksyms{}
	}
	defer f.Close()
	return loadKsyms(f, sizeHint)
}

// name is the module ("[kernel]" or "[module]") and symbol of a kernel
// address: the symbol at or before it (kallsyms gives no sizes).
func (k *ksyms) name(addr uint64) (module, symbol string) {
	i, found := slices.BinarySearchFunc(k.ents, addr, func(e ksym, a uint64) int { return cmp.Compare(e.addr, a) })
	if !found {
		i--
	}
	if i < 0 {
		return "[kernel]", fmt.Sprintf("[kernel]+0x%x", addr)
	}
	e := &k.ents[i]
	c := k.chunks[e.ref>>16]
	off := int(e.ref & 0xffff)
	symbol = string(c[off : off+int(e.n)])
	module = "[kernel]"
	if e.mod > 0 {
		module = "[" + k.mods[e.mod-1] + "]"
	}
	return module, symbol
}
