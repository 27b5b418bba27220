package a2n

import (
	"cmp"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// cachedLoad loads path through the table cache in dir and says whether
// the table came from it.
func cachedLoad(t *testing.T, path, dir string) (*Module, bool) {
	t.Helper()
	m := loadModule(path, dir)
	if m.Err != nil {
		t.Fatalf("%s: %v", path, m.Err)
	}
	return m, m.tab.c != nil
}

// sameSymbols checks that a and b name every probed offset of the
// module's code alike (stride bytes apart, at most ~300 k probes).
func sameSymbols(t *testing.T, path string, a, b *Module) int {
	t.Helper()
	if a.Source != b.Source || a.Stripped != b.Stripped || a.Warning != b.Warning || a.dwPath != b.dwPath || !reflect.DeepEqual(a.loads, b.loads) {
		t.Fatalf("%s: module differs:\nparsed %q %v %q %q %v\ncached %q %v %q %q %v", path, a.Source, a.Stripped, a.Warning, a.dwPath, a.loads, b.Source, b.Stripped, b.Warning, b.dwPath, b.loads)
	}
	n := 0
	for _, p := range a.loads {
		if p.Flags&elf.PF_X == 0 {
			continue
		}
		stride := max(3, p.Filesz/300000) // odd-ish: not always a symbol start
		for off := p.Off; off < p.Off+p.Filesz; off += stride {
			s1, va1, ok1 := a.Symbol(off)
			s2, va2, ok2 := b.Symbol(off)
			if s1 != s2 || va1 != va2 || ok1 != ok2 {
				t.Fatalf("%s: file offset %#x: parsed %+v %#x %v, cached %+v %#x %v", path, off, s1, va1, ok1, s2, va2, ok2)
			}
			if ok1 {
				n++
			}
		}
	}
	return n
}

// A table mapped from the cache names every address as the parsed one:
// modules with .symtab (the go command), stripped distribution
// libraries (.dynsym, PLT stubs, .eh_frame ranges), a large C program.
func TestTableCacheNamesAsParsed(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a2n")
	for _, path := range realModules(t, append([]string{goBinary(t), "/usr/lib/gcc/x86_64-linux-gnu/12/cc1"}, benchLibs...)) {
		parsed := loadModule(path, "")
		if _, hit := cachedLoad(t, path, dir); hit {
			t.Fatalf("%s: a hit in an empty cache", path)
		}
		m, hit := cachedLoad(t, path, dir)
		if !hit {
			t.Fatalf("%s: not found in the cache after it was stored", path)
		}
		named := sameSymbols(t, path, parsed, m)
		t.Logf("%s: %d symbols, %d ranges; %d probes named alike", path, len(m.tab.c.ents), len(m.tab.fdes), named)
		if named == 0 {
			t.Fatalf("%s: no probe named", path)
		}
	}
}

// realModules is those of paths on this machine (the others logged); at
// least two, or the test fails.
func realModules(t *testing.T, paths []string) []string {
	t.Helper()
	var have []string
	for _, path := range paths {
		if _, err := os.Stat(path); err != nil {
			t.Logf("%s: %v", path, err)
			continue
		}
		have = append(have, path)
	}
	if len(have) < 2 {
		t.Fatalf("only %v of %v here", have, paths)
	}
	return have
}

// A changed module, a debug file installed since, a damaged or foreign
// cache file, and a directory others can write are each a miss: the
// module is parsed again (and stored again where the directory allows).
func TestTableCacheMisses(t *testing.T) {
	_, prog := builtSrc(t, "testdata/funcs.c", "-Wl,--build-id")
	dir := filepath.Join(t.TempDir(), "a2n")
	work := filepath.Join(t.TempDir(), "prog")
	copyFile := func(src string) {
		t.Helper()
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		os.Remove(work) // a new inode, as an install does
		if err := os.WriteFile(work, b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	load := func(wantHit bool, what string) *Module {
		t.Helper()
		m, hit := cachedLoad(t, work, dir)
		if hit != wantHit {
			t.Fatalf("%s: cache hit %v, want %v", what, hit, wantHit)
		}
		sameSymbols(t, work, loadModule(work, ""), m)
		return m
	}
	copyFile(prog)
	load(false, "first load")
	load(true, "second load")

	// The file replaced by its stripped copy: names from .eh_frame.
	copyFile(stripped(t, prog))
	withDebugRoot(t, t.TempDir())
	if m := load(false, "stripped copy"); !strings.Contains(m.Source, ".eh_frame") {
		t.Fatalf("stripped copy: names from %q", m.Source)
	}
	load(true, "stripped copy again")

	// Its debug file installed: the cached .eh_frame table is stale.
	f, _ := elf.Open(prog)
	id := buildID(f)
	f.Close()
	if len(id) < 3 {
		t.Fatal("no build-id")
	}
	if err := os.MkdirAll(filepath.Join(DebugRoot, ".build-id", id[:2]), 0o755); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command("objcopy", "--only-keep-debug", prog, filepath.Join(DebugRoot, ".build-id", id[:2], id[2:]+".debug")).CombinedOutput(); err != nil {
		needTool(t, "objcopy", "makes the debug file of the test: "+err.Error()+string(b))
	}
	if m := load(false, "debug file installed"); !strings.HasPrefix(m.Source, "debug file") {
		t.Fatalf("after the debug file was installed: names from %q", m.Source)
	}
	load(true, "debug file installed, again")

	// Damaged entries: each a miss, never a panic, and stored again.
	entry := func() string {
		fi, err := os.Stat(work)
		if err != nil {
			t.Fatal(err)
		}
		return cachePath(dir, moduleKey(work, fi))
	}
	good, err := os.ReadFile(entry())
	if err != nil {
		t.Fatal(err)
	}
	for name, bad := range map[string][]byte{
		"empty":          {},
		"cut short":      good[:len(good)/2],
		"header only":    good[:headerSize],
		"wrong magic":    append([]byte("PIA2NTB0"), good[8:]...),
		"section beyond": patched(good, 8+16*secSyms, 0xfffffff8),
		"odd length":     patched(good, 16+16*secSyms, 25),
		"unsorted":       swapFirstEntries(t, good),
		"name beyond":    patched(good, int(leU64(good[8+16*secSyms:]))+16, 0x10_ffff0000),
	} {
		if err := os.WriteFile(entry(), bad, 0o600); err != nil {
			t.Fatal(err)
		}
		load(false, name)
		load(true, name+", stored again")
	}

	// Another user's entry, and a directory others can write: not used.
	if os.Geteuid() == 0 {
		if err := os.Chown(entry(), 65534, 65534); err != nil {
			t.Fatal(err)
		}
		load(false, "entry of another user")
	}
	open := filepath.Join(t.TempDir(), "open")
	os.Mkdir(open, 0o777)
	os.Chmod(open, 0o777)
	loadModule(work, open)
	if ents, _ := os.ReadDir(open); len(ents) != 0 {
		t.Fatalf("stored %d entries in a directory others can write", len(ents))
	}
}

func leU64(b []byte) uint64 {
	var v uint64
	for i := 7; i >= 0; i-- {
		v = v<<8 | uint64(b[i])
	}
	return v
}

// patched is b with the 64-bit little-endian word at off set to v.
func patched(b []byte, off int, v uint64) []byte {
	c := append([]byte(nil), b...)
	for i := 0; i < 8; i++ {
		c[off+i] = byte(v >> (8 * i))
	}
	return c
}

// swapFirstEntries is b with its first two symbols' addresses swapped.
func swapFirstEntries(t *testing.T, b []byte) []byte {
	off := int(leU64(b[8+16*secSyms:]))
	if leU64(b[16+16*secSyms:]) < 48 {
		t.Fatal("fewer than two symbols in the entry")
	}
	c := append([]byte(nil), b...)
	copy(c[off:off+8], b[off+24:off+32])
	copy(c[off+24:off+32], b[off:off+8])
	return c
}

// The kernel's table: stored from the kallsyms text, mapped by the next
// resolver of the same text (names and kernel modules alike), a miss for
// another text.
func TestKernelTableCache(t *testing.T) {
	ks := []byte("ffffffff81000000 T _stext\nffffffff81000100 T do_work\nffffffff81000200 t helper\nffffffff81000300 d some_data\nffffffffc0001000 t mod_fn\t[mymod]\nffffffffc0001100 t mod_end\t[mymod]\n")
	if real, err := os.ReadFile("/proc/kallsyms"); err == nil && strings.Contains(string(real), " schedule\n") && !strings.HasPrefix(string(real), "0000000000000000") {
		ks = real
	}
	dir := filepath.Join(t.TempDir(), "a2n")
	addrs := []uint64{0xffffffff81000150, 0xffffffff81000250, 0xffffffffc0001010, 0xffffffffc0001110, 0x1000}
	for _, l := range strings.SplitN(string(ks), "\n", 2000) {
		if f := strings.Fields(l); len(f) >= 3 {
			var a uint64
			for _, c := range f[0] {
				a = a<<4 | uint64(strings.IndexRune("0123456789abcdef", c))
			}
			addrs = append(addrs, a, a+1, a+7)
		}
	}
	resolve := func(r *Resolver) []Result {
		var out []Result
		for _, a := range addrs {
			out = append(out, r.Resolve(1, a, true))
		}
		return out
	}
	want := resolve(New(ks))
	r1 := NewCached(ks, dir)
	if got := resolve(r1); !reflect.DeepEqual(got, want) {
		t.Fatal("the resolver that stored the table names differently")
	}
	if r1.kc != nil {
		t.Fatal("a hit in an empty cache")
	}
	r2 := NewCached(ks, dir)
	got := resolve(r2)
	if r2.kc == nil {
		t.Fatal("the kernel table was not read from the cache")
	}
	if !reflect.DeepEqual(got, want) {
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("%#x: cached %+v, parsed %+v", addrs[i], got[i], want[i])
			}
		}
	}
	byStart := func(k []kmod) []kmod {
		k = slices.Clone(k)
		slices.SortFunc(k, func(a, b kmod) int { return cmp.Compare(a.start, b.start) })
		return k
	}
	if !reflect.DeepEqual(byStart(r2.kmods), byStart(New(ks).waitKmods())) {
		t.Fatalf("kernel modules differ: %v", r2.kmods)
	}
	other := append([]byte("ffffffff80000000 T early\n"), ks...)
	r3 := NewCached(other, dir)
	if res := r3.Resolve(1, 0xffffffff80000010, true); res.Symbol != "early" || r3.kc != nil {
		t.Fatalf("another kallsyms text: %+v (mapped from the cache: %v)", res, r3.kc != nil)
	}
}

// waitKmods is r's kernel module bounds once its table is loaded.
func (r *Resolver) waitKmods() []kmod {
	<-r.kready
	return r.kmods
}

// TestTableCachePrunes: beyond maxCacheEntries or maxCacheBytes the oldest
// entries (by write time) go, down to three quarters of both bounds; under
// both bounds nothing goes.
func TestTableCachePrunes(t *testing.T) {
	defer func(n int, b int64) { maxCacheEntries, maxCacheBytes = n, b }(maxCacheEntries, maxCacheBytes)
	fill := func(dir string, n, size int) {
		t.Helper()
		base := time.Now().Add(-time.Hour)
		for i := 0; i < n; i++ {
			p := filepath.Join(dir, fmt.Sprintf("e%02d", i))
			if err := os.WriteFile(p, make([]byte, size), 0o600); err != nil {
				t.Fatal(err)
			}
			tm := base.Add(time.Duration(i) * time.Minute) // e00 oldest
			if err := os.Chtimes(p, tm, tm); err != nil {
				t.Fatal(err)
			}
		}
	}
	left := func(dir string) []string {
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		return names
	}
	for _, c := range []struct {
		what    string
		entries int
		bytes   int64
		n, size int
		want    []string
	}{
		{"under both bounds", 10, 100 << 10, 10, 1 << 10, []string{"e00", "e01", "e02", "e03", "e04", "e05", "e06", "e07", "e08", "e09"}},
		{"over the entry bound", 8, 100 << 10, 10, 1 << 10, []string{"e04", "e05", "e06", "e07", "e08", "e09"}},
		{"over the byte bound", 100, 8 << 10, 10, 1 << 10, []string{"e04", "e05", "e06", "e07", "e08", "e09"}},
		{"one entry over the byte bound", 100, 4 << 10, 1, 8 << 10, nil},
	} {
		dir := t.TempDir()
		maxCacheEntries, maxCacheBytes = c.entries, c.bytes
		fill(dir, c.n, c.size)
		pruneCache(dir)
		if got := left(dir); !slices.Equal(got, c.want) {
			t.Errorf("%s: left %v, want %v", c.what, got, c.want)
		}
	}
}

// goBinary is the go command the tests run with: a large real Go binary.
func goBinary(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command: %v", err)
	}
	if r, err := filepath.EvalSymlinks(p); err == nil {
		p = r
	}
	return p
}
