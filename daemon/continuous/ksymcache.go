package continuous

import (
	"encoding/binary"
	"errors"
	"io/fs"
	"os"
	"time"

	"perfinsp/analysis/a2n"
)

// The kernel's table is kept in the symbol cache between runs of the
// agent: /proc/kallsyms is formatted by the kernel symbol by symbol at
// each read, which costs a starting agent more CPU than anything else it
// names. An entry is keyed by the boot (its random id: the kernel's text
// is where it was booted) and the kernel modules loaded (/proc/modules,
// their load addresses with them) and used for at most the refresh period
// after it was written, as a running agent uses the table it read: what
// the kernel adds without a module (BPF programs, trampolines) is named as
// of the reading, at most that period old.

// ksymMagic starts an entry; the digit is the format version.
const ksymMagic = "PIKSYMS1"

// maxKsymBlob bounds an entry read (a distribution kernel's table with
// its modules is a few MB).
const maxKsymBlob = 256 << 20

// kernelKey is what identifies the kernel's symbols now (nil: unknown,
// no entry used or stored).
func kernelKey() []byte {
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil || len(boot) == 0 {
		return nil
	}
	mods, err := os.ReadFile("/proc/modules")
	if err != nil && !errors.Is(err, fs.ErrNotExist) { // (absent: a kernel without modules)
		return nil
	}
	key := append([]byte("kallsyms\x00"), boot...)
	return append(append(key, 0), mods...)
}

// loadKernel returns the kernel's table: the symbol cache's entry for
// the kernel as it is now when one younger than maxAge is there, else
// /proc/kallsyms read (and stored).
func loadKernel(dir string, maxAge time.Duration, sizeHint int) *ksyms {
	var key []byte
	if dir != "" && maxAge > 0 {
		key = kernelKey()
	}
	if key != nil {
		if b, written, ok := a2n.ReadBlob(dir, key, maxKsymBlob); ok && time.Since(written) < maxAge && !written.After(time.Now()) {
			if k, ok := decodeKsyms(b, key); ok {
				return k
			}
		}
	}
	k := readKsyms(sizeHint)
	if key != nil && len(k.ents) > 0 {
		a2n.WriteBlob(dir, key, k.encode(key))
	}
	return k
}

// encode lays k out for decodeKsyms: the magic, the key, the modules'
// and the chunks' counts and lengths with their bytes, then the entries
// (16 bytes each), all little-endian.
func (k *ksyms) encode(key []byte) []byte {
	n := len(ksymMagic) + 16 + len(key) + 16*len(k.ents)
	for _, m := range k.mods {
		n += 2 + len(m)
	}
	for _, c := range k.chunks {
		n += 4 + len(c)
	}
	b := make([]byte, 0, n)
	b = append(b, ksymMagic...)
	le := binary.LittleEndian
	b = le.AppendUint32(b, uint32(len(key)))
	b = le.AppendUint32(b, uint32(len(k.mods)))
	b = le.AppendUint32(b, uint32(len(k.chunks)))
	b = le.AppendUint32(b, uint32(len(k.ents)))
	b = append(b, key...)
	for _, m := range k.mods {
		b = le.AppendUint16(b, uint16(len(m)))
		b = append(b, m...)
	}
	for _, c := range k.chunks {
		b = le.AppendUint32(b, uint32(len(c)))
		b = append(b, c...)
	}
	for _, e := range k.ents {
		b = le.AppendUint64(b, e.addr)
		b = le.AppendUint32(b, e.ref)
		b = le.AppendUint16(b, e.n)
		b = le.AppendUint16(b, e.mod)
	}
	return b
}

// decodeKsyms reads an entry encode wrote for key (ok false: not one, or
// not a table name can search: every count and length within the data,
// every name within its chunk, every module known, the addresses
// strictly ascending). The chunks are views of b.
func decodeKsyms(b, key []byte) (*ksyms, bool) {
	d := decoder{b: b}
	if string(d.next(len(ksymMagic))) != ksymMagic {
		return nil, false
	}
	keyLen, nMods, nChunks, nEnts := d.u32(), d.u32(), d.u32(), d.u32()
	if d.bad || keyLen != uint32(len(key)) || string(d.next(int(keyLen))) != string(key) ||
		nMods > 0xffff || nEnts > maxKsyms || uint64(nEnts)*16 > uint64(len(d.b)) || nChunks > uint32(len(d.b)/4) {
		return nil, false
	}
	k := &ksyms{mods: make([]string, 0, nMods), chunks: make([][]byte, 0, nChunks), ents: make([]ksym, 0, nEnts)}
	for range nMods {
		k.mods = append(k.mods, string(d.next(int(d.u16()))))
	}
	for range nChunks {
		n := d.u32()
		if n > ksymChunk {
			return nil, false
		}
		c := d.next(int(n))
		k.chunks = append(k.chunks, c[:len(c):len(c)])
	}
	for i := range nEnts {
		e := ksym{addr: d.u64(), ref: d.u32(), n: d.u16(), mod: d.u16()}
		if d.bad {
			return nil, false
		}
		ci, off := int(e.ref>>16), int(e.ref&0xffff)
		if ci >= len(k.chunks) || off+int(e.n) > len(k.chunks[ci]) || int(e.mod) > len(k.mods) ||
			i > 0 && e.addr <= k.ents[i-1].addr {
			return nil, false
		}
		k.ents = append(k.ents, e)
	}
	if d.bad || len(d.b) != 0 {
		return nil, false
	}
	return k, true
}

// decoder reads little-endian fields off b; past its end every read
// gives zeros and sets bad.
type decoder struct {
	b   []byte
	bad bool
}

func (d *decoder) next(n int) []byte {
	if n < 0 || n > len(d.b) {
		d.bad, d.b = true, nil
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) u16() uint16 {
	if v := d.next(2); v != nil {
		return binary.LittleEndian.Uint16(v)
	}
	return 0
}

func (d *decoder) u32() uint32 {
	if v := d.next(4); v != nil {
		return binary.LittleEndian.Uint32(v)
	}
	return 0
}

func (d *decoder) u64() uint64 {
	if v := d.next(8); v != nil {
		return binary.LittleEndian.Uint64(v)
	}
	return 0
}
