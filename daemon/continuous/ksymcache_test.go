package continuous

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"perfinsp/analysis/a2n"
)

const testKallsyms = "ffffffff81000200 t helper\n" +
	"ffffffff81000000 T _stext\n" +
	"ffffffff81000100 T do_work\n" +
	"ffffffffc0001000 t mod_fn\t[mymod]\n" +
	"ffffffffc0001800 t other_fn\t[othermod]\n"

var testAddrs = []uint64{0xffffffff81000000, 0xffffffff81000150, 0xffffffff81000250, 0xffffffffc0001010, 0xffffffffc0002000, 0x1000}

// sameNames checks that a and b name every test address alike.
func sameNames(t *testing.T, a, b *ksyms) {
	t.Helper()
	for _, addr := range testAddrs {
		m1, s1 := a.name(addr)
		m2, s2 := b.name(addr)
		if m1 != m2 || s1 != s2 {
			t.Fatalf("%#x: %s %s, decoded %s %s", addr, m1, s1, m2, s2)
		}
	}
}

// An encoded kernel table decodes to one that names as the parsed one;
// each prefix of it, another key and each damaged field are refused,
// never a panic.
func TestKsymsEncoding(t *testing.T) {
	k := loadKsyms(strings.NewReader(testKallsyms), 0)
	key := []byte("kallsyms\x00boot")
	b := k.encode(key)
	d, ok := decodeKsyms(b, key)
	if !ok {
		t.Fatal("the encoding is refused")
	}
	sameNames(t, k, d)
	if !reflect.DeepEqual(k.ents, d.ents) || !reflect.DeepEqual(k.mods, d.mods) {
		t.Fatalf("decoded %+v %q, want %+v %q", d.ents, d.mods, k.ents, k.mods)
	}
	for n := range len(b) {
		if _, ok := decodeKsyms(b[:n], key); ok {
			t.Fatalf("accepted the first %d of %d bytes", n, len(b))
		}
	}
	if _, ok := decodeKsyms(append(b, 0), key); ok {
		t.Fatal("accepted trailing bytes")
	}
	if _, ok := decodeKsyms(b, []byte("kallsyms\x00other")); ok {
		t.Fatal("accepted another key")
	}
	ents := len(b) - 16*len(k.ents)
	set := func(off int, v []byte) []byte { c := append([]byte(nil), b...); copy(c[off:], v); return c }
	u16 := func(v uint16) []byte { return binary.LittleEndian.AppendUint16(nil, v) }
	u32 := func(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
	for name, bad := range map[string][]byte{
		"wrong magic":          set(0, []byte("PIKSYMS0")),
		"entries beyond":       set(20, u32(1<<30)),
		"modules beyond":       set(12, u32(0xffff)),
		"chunks beyond":        set(16, u32(0xfffffff)),
		"unsorted":             set(ents+16, b[ents:ents+8]),
		"name beyond chunk":    set(ents+12, u16(0xffff)),
		"chunk beyond":         set(ents+8, u32(7<<16)),
		"module beyond":        set(ents+14, u16(9)),
		"module name beyond":   set(8+16+len(key), u16(0xfff)),
		"key length beyond":    set(8, u32(0xffffffff)),
		"key length shortened": set(8, u32(3)),
	} {
		if _, ok := decodeKsyms(bad, key); ok {
			t.Errorf("%s: accepted", name)
		}
	}
}

// loadKernel uses the symbol cache's entry for the kernel as it is now
// while it is younger than the age given, and reads /proc/kallsyms past
// it or without a cache.
func TestLoadKernelFromCache(t *testing.T) {
	key := kernelKey()
	if key == nil {
		t.Fatal("no key for this kernel (boot id or /proc/modules unreadable)")
	}
	dir := filepath.Join(t.TempDir(), "a2n")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	// A table no kernel has, stored as the entry for this one.
	fake := loadKsyms(strings.NewReader(testKallsyms), 0)
	a2n.WriteBlob(dir, key, fake.encode(key))
	ents, err := os.ReadDir(dir)
	if err != nil || len(ents) != 1 {
		t.Fatalf("entries stored: %v %v", ents, err)
	}
	sameNames(t, fake, loadKernel(dir, time.Hour, 0))
	isFake := func(k *ksyms) bool { return reflect.DeepEqual(k.ents, fake.ents) }
	if isFake(loadKernel("", time.Hour, 0)) || isFake(loadKernel(dir, 0, 0)) {
		t.Fatal("the entry used without a cache or a maximum age")
	}
	old := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(filepath.Join(dir, ents[0].Name()), old, old); err != nil {
		t.Fatal(err)
	}
	if isFake(loadKernel(dir, time.Hour, 0)) {
		t.Fatal("an entry older than the maximum age used")
	}
	// Read anew, the kernel's own table is stored where it can be read.
	real := readKsyms(0)
	if len(real.ents) == 0 {
		t.Logf("kallsyms shows no addresses here: nothing stored")
		return
	}
	got := loadKernel(dir, time.Hour, 0)
	if !reflect.DeepEqual(got.ents, real.ents) {
		t.Fatalf("%d symbols from the cache, %d in kallsyms", len(got.ents), len(real.ents))
	}
}

// FuzzDecodeKsyms decodes arbitrary bytes as a stored kernel table: never
// a panic, and a table accepted names any address from its own names.
func FuzzDecodeKsyms(f *testing.F) {
	key := []byte("k")
	f.Add(loadKsyms(strings.NewReader(testKallsyms), 0).encode(key))
	f.Add([]byte(ksymMagic + "\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00k"))
	f.Fuzz(func(t *testing.T, b []byte) {
		k, ok := decodeKsyms(b, key)
		if !ok {
			return
		}
		for _, addr := range append(testAddrs, 0, ^uint64(0)) {
			k.name(addr)
		}
		for _, e := range k.ents {
			k.name(e.addr)
		}
	})
}
