package a2n

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"unsafe"
)

// mappedLoad loads path through the table cache in dir, its table mapped
// (Cache.MapTables), and says whether the table came from the cache.
func mappedLoad(t *testing.T, path, dir string) (*Module, bool) {
	t.Helper()
	m := loadModuleFrom(path, dir, true)
	if m.Err != nil {
		t.Fatalf("%s: %v", path, m.Err)
	}
	return m, m.tab.c != nil
}

// A table mapped from the cache (searched where it lies, its order not
// checked whole) names every probed address as the parsed module and the
// table read whole do, and lies in a mapping Release unmaps.
func TestMappedTableNamesAsRead(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a2n")
	for _, path := range realModules(t, append([]string{goBinary(t)}, benchLibs...)) {
		parsed := loadModule(path, "")
		if _, hit := mappedLoad(t, path, dir); hit {
			t.Fatalf("%s: a hit in an empty cache", path)
		}
		read, hit := cachedLoad(t, path, dir)
		if !hit {
			t.Fatalf("%s: not read from the cache after it was stored", path)
		}
		m, hit := mappedLoad(t, path, dir)
		if !hit {
			t.Fatalf("%s: not mapped from the cache after it was stored", path)
		}
		if len(m.mappings) != 1 {
			t.Fatalf("%s: %d mappings, want the cache file's", path, len(m.mappings))
		}
		if n := sameSymbols(t, path, parsed, m); n == 0 {
			t.Fatalf("%s: no probe named", path)
		}
		sameSymbols(t, path, read, m)
		m.Release()
		if m.mappings != nil {
			t.Fatalf("%s: mappings left after Release", path)
		}
	}
}

// Damaged cache entries, mapped: a miss (the module parsed again) or names
// found within the entries and names, never a panic; an entry cut short
// while it is mapped costs the addresses read past its end their names.
func TestMappedTableDamaged(t *testing.T) {
	path := goBinary(t)
	dir := filepath.Join(t.TempDir(), "a2n")
	parsed := loadModule(path, dir) // stores the entry
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	entry := cachePath(dir, moduleKey(path, fi))
	good, err := os.ReadFile(entry)
	if err != nil {
		t.Fatal(err)
	}
	probe := func(m *Module) int {
		named := 0
		for _, p := range m.loads {
			for off := p.Off; off < p.Off+p.Filesz; off += max(7, p.Filesz/5000) {
				if _, _, ok := m.Symbol(off); ok {
					named++
				}
			}
		}
		return named
	}
	for name, bad := range map[string][]byte{
		"cut short":      good[:len(good)/2],
		"header only":    good[:headerSize],
		"wrong magic":    append([]byte("PIA2NTB0"), good[8:]...),
		"section beyond": patched(good, 8+16*secSyms, 0xfffffff8),
		"unsorted":       swapFirstEntries(t, good),
		"name beyond":    patched(good, int(leU64(good[8+16*secSyms:]))+16, 0x10_ffff0000),
	} {
		if err := os.WriteFile(entry, bad, 0o600); err != nil {
			t.Fatal(err)
		}
		m, _ := mappedLoad(t, path, dir)
		if n := probe(m); n == 0 {
			t.Fatalf("%s: nothing named", name)
		}
		m.Release()
	}

	// Cut short in place while mapped: the lookups past the new end
	// fault, each recovered as an address without a name.
	if err := os.WriteFile(entry, good, 0o600); err != nil {
		t.Fatal(err)
	}
	m, hit := mappedLoad(t, path, dir)
	if !hit {
		t.Fatal("the restored entry is not used")
	}
	before := probe(m)
	if err := os.Truncate(entry, headerSize); err != nil {
		t.Fatal(err)
	}
	after := probe(m)
	m.Release()
	if before == 0 || after >= before {
		t.Fatalf("named %d before the entry was cut short, %d after: want some, then fewer", before, after)
	}
	t.Logf("%s: %d probes named, %d once its entry was cut short (the parse names %d)", path, before, after, probe(parsed))
}

// FuzzDecodeTableMapped decodes arbitrary bytes as a cache entry the way a
// mapped one is (order unchecked) and searches it: never a panic, and
// every name found lies within the names section.
func FuzzDecodeTableMapped(f *testing.F) {
	key := []byte("module\x00fuzz")
	var seed []byte
	{
		var w bytesWriter
		syms := []Sym{{Addr: 0x1000, Size: 0x10, Name: "a"}, {Addr: 0x1010, Size: 0, Name: "bb"}, {Addr: 0x2000, Size: 8, Name: "ccc"}}
		c := cached{meta: []string{"s", "", "", "", ""}, fdes: []fdeRange{{start: 0x3000, size: 0x20}}, fdeNames: map[uint64]string{0x3000: "fde"}}
		if err := encodeTable(&w, key, &c, syms); err != nil {
			f.Fatal(err)
		}
		seed = w
	}
	f.Add(seed)
	f.Add(swapFirstEntriesBytes(seed))
	f.Add(seed[:headerSize])
	f.Fuzz(func(t *testing.T, b []byte) {
		// 8-aligned, as a mapping is
		buf := make([]uint64, (len(b)+7)/8)
		data := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(buf))), len(buf)*8)[:len(b)]
		copy(data, b)
		c, ok := decodeTable(data, key, false)
		if !ok {
			return
		}
		tb := table{fdes: c.fdes, fdeNames: c.fdeNames, c: &c.tab}
		addrs := []uint64{0, 1, ^uint64(0)}
		for i, e := range c.tab.ents {
			if i > 64 {
				break
			}
			addrs = append(addrs, e.addr, e.addr+1, e.addr-1)
		}
		for _, a := range addrs {
			s, ok := tb.find(a)
			if !ok || s.Name == "" {
				continue
			}
			if _, in := c.fdeNames[s.Addr]; !in && !slices.ContainsFunc(c.tab.ents, func(e centry) bool {
				return uint64(e.off)+uint64(e.n) <= uint64(len(c.tab.names)) && string(c.tab.names[e.off:e.off+e.n]) == s.Name
			}) {
				t.Fatalf("address %#x: name %q found in no entry", a, s.Name)
			}
		}
	})
}

type bytesWriter []byte

func (w *bytesWriter) Write(p []byte) (int, error) { *w = append(*w, p...); return len(p), nil }

// swapFirstEntriesBytes is swapFirstEntries without a test (fuzz seeds).
func swapFirstEntriesBytes(b []byte) []byte {
	off := int(leU64(b[8+16*secSyms:]))
	c := append([]byte(nil), b...)
	copy(c[off:off+8], b[off+24:off+32])
	copy(c[off+24:off+32], b[off:off+8])
	return c
}
