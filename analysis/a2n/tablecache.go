package a2n

import (
	"bufio"
	"crypto/sha256"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"
)

// A table cache keeps the symbol tables A2N builds (a module's, the
// kernel's from a trace's kallsyms) in a directory, one file each, laid
// out to be used as it lies: a later post reads the file and searches it
// in place, with no parsing or sorting. Parsing
// the modules a system-wide trace hits and sorting kallsyms was a third
// of a flat report's CPU (docs/post.md). perf keeps copies of the files
// it read under ~/.debug, by build-id, and parses them again each run;
// this keeps the result of the parse.
//
// A module's entry is keyed by what identifies the file's contents on
// this machine (path, device, inode, size, modification and change
// times) and by the build-id debug file it consulted (present with its
// identity, or absent): a rebuilt, replaced or stripped file, or a debug
// package installed since, is a miss and is parsed again. A kernel entry
// is keyed by the kallsyms text (length and two CRCs). Entries are
// written whole to a temporary file and renamed into place; a file that
// does not check out (wrong magic, version or key, sizes out of bounds,
// unsorted addresses) is ignored and replaced; a table mapped rather than
// read (Cache.MapTables: only the pages a search touches are read) has
// its sizes and bounds checked, not its order. Names are bounds-checked
// at each use, and a file cut short while mapped faults into a recovered
// panic as a module file does (mapped.go). The directory must belong to
// the user and not be writable by others; the oldest entries are removed
// when it holds more than maxCacheEntries or maxCacheBytes.

// tableMagic starts every cache file; the digit is the format version.
const tableMagic = "PIA2NTB4"

// maxCacheEntries and maxCacheBytes bound the directory (programs built
// in temporary directories make new paths every run; a kernel's entry is
// ~6 MB, a large library's a few MB).
var (
	maxCacheEntries       = 2048
	maxCacheBytes   int64 = 1 << 30
)

// centry is one symbol of a cached table (24 bytes, no pointers).
type centry struct {
	addr, size uint64
	off, n     uint32 // its name in the table's names
}

// ctab is a sorted symbol table in a cache file (read into memory).
type ctab struct {
	ents  []centry
	names []byte
}

func (c *ctab) pred(addr uint64) int {
	return sort.Search(len(c.ents), func(i int) bool { return c.ents[i].addr > addr }) - 1
}

func (c *ctab) at(i int) Sym {
	e := &c.ents[i]
	s := Sym{Addr: e.addr, Size: e.size}
	if e.n > 0 && uint64(e.off)+uint64(e.n) <= uint64(len(c.names)) {
		s.Name = unsafe.String(&c.names[e.off], int(e.n))
	}
	return s
}

// find is symtab.find over the cached entries.
func (c *ctab) find(addr uint64) (Sym, bool) {
	i := c.pred(addr)
	if i < 0 {
		return Sym{}, false
	}
	s := c.at(i)
	if s.Size > 0 && addr >= s.Addr+s.Size {
		return Sym{}, false
	}
	return s, true
}

// DefaultTableCacheDir is where post keeps tables unless told otherwise:
// $XDG_CACHE_HOME/perfinsp/a2n, else ~/.cache/perfinsp/a2n ("" if neither
// is known).
func DefaultTableCacheDir() string {
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "perfinsp", "a2n")
	}
	if h, err := os.UserHomeDir(); err == nil && filepath.IsAbs(h) {
		return filepath.Join(h, ".cache", "perfinsp", "a2n")
	}
	return ""
}

// cacheDirOK makes dir (0700) if missing and says whether it is the
// user's own and closed to others.
func cacheDirOK(dir string) bool {
	if dir == "" {
		return false
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return false
	}
	fi, err := os.Lstat(dir)
	if err != nil || !fi.IsDir() || fi.Mode().Perm()&0o022 != 0 {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Geteuid()
}

// fileIdent is what identifies a file's contents here.
func fileIdent(fi os.FileInfo) []byte {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	b := make([]byte, 0, 48)
	for _, v := range []uint64{uint64(st.Dev), st.Ino, uint64(st.Size), uint64(st.Mtim.Sec), uint64(st.Mtim.Nsec), uint64(st.Ctim.Sec), uint64(st.Ctim.Nsec)} {
		b = binary.LittleEndian.AppendUint64(b, v)
	}
	return b
}

// debugIdent is the identity of the separate debug files looked for (the
// paths of debugCandidates) as they are now: each one's, or "absent".
func debugIdent(paths []string) []byte {
	var b []byte
	for _, p := range paths {
		b = append(b, p...)
		if fi, err := os.Stat(p); err != nil {
			b = append(b, " absent\x00"...)
		} else {
			b = append(append(b, ' '), fileIdent(fi)...)
			b = append(b, 0)
		}
	}
	return b
}

// moduleKey is the key of the module file at path whose fstat is fi.
func moduleKey(path string, fi os.FileInfo) []byte {
	id := fileIdent(fi)
	if id == nil {
		return nil
	}
	return append(append([]byte("module\x00"+path+"\x00"), id...), "\x00"+DebugRoot...)
}

// kernelKey is the key of a kallsyms text.
func kernelKey(kallsyms []byte) []byte {
	b := []byte("kernel\x00")
	b = binary.LittleEndian.AppendUint64(b, uint64(len(kallsyms)))
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(kallsyms, crc32.MakeTable(crc32.Castagnoli)))
	return binary.LittleEndian.AppendUint32(b, crc32.ChecksumIEEE(kallsyms))
}

func cachePath(dir string, key []byte) string {
	h := sha256.Sum256(key)
	return filepath.Join(dir, hex.EncodeToString(h[:20])+".tab")
}

// cached is what a cache file holds besides its key.
type cached struct {
	tab      ctab
	fdes     []fdeRange
	fdeNames map[uint64]string
	loads    []elf.ProgHeader
	plt      []addrRange
	meta     []string // module: Source, Warning, dwPath, the debug files looked for (NUL-separated), stripped ("1" or "")
	dbgID    []byte   // module: the debug file's identity when parsed
}

// Section numbers of a cache file.
const (
	secKey = iota
	secMeta
	secDbg
	secSyms
	secFdes
	secFdeNames
	secLoads
	secPLT
	secNames
	nSecs
)

// headerSize: magic, then an (offset, length) pair per section.
const headerSize = 8 + 16*nSecs

// encodeTable writes one cache file to w, streaming (a kernel's table is
// megabytes: built in memory first, it cost more fresh pages than its
// parse): the sections' sizes are known beforehand, the names are laid
// end to end in the order the entries refer to them.
func encodeTable(w io.Writer, key []byte, c *cached, syms []Sym) error {
	fn := make([]uint64, 0, len(c.fdeNames))
	for a := range c.fdeNames {
		fn = append(fn, a)
	}
	slices.Sort(fn)
	var namesLen uint64
	for _, s := range syms {
		namesLen += uint64(len(s.Name))
	}
	for _, a := range fn {
		namesLen += uint64(len(c.fdeNames[a]))
	}
	if namesLen > 1<<32-1 {
		return errors.New("names beyond 4 GB")
	}
	var meta []byte
	for _, m := range c.meta {
		meta = binary.LittleEndian.AppendUint32(meta, uint32(len(m)))
		meta = append(meta, m...)
	}
	var size [nSecs]uint64
	size[secKey], size[secMeta], size[secDbg] = uint64(len(key)), uint64(len(meta)), uint64(len(c.dbgID))
	size[secSyms], size[secFdes], size[secFdeNames] = 24*uint64(len(syms)), 16*uint64(len(c.fdes)), 16*uint64(len(fn))
	size[secLoads], size[secPLT], size[secNames] = 56*uint64(len(c.loads)), 16*uint64(len(c.plt)), namesLen
	hdr := make([]byte, headerSize)
	copy(hdr, tableMagic)
	off := uint64(headerSize)
	var pad [nSecs]int
	for i := range size {
		pad[i] = int(-off & 7)
		off += uint64(pad[i])
		binary.LittleEndian.PutUint64(hdr[8+16*i:], off)
		binary.LittleEndian.PutUint64(hdr[16+16*i:], size[i])
		off += size[i]
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	var zero [8]byte
	var b [56]byte
	bw.Write(hdr)
	section := func(i int) { bw.Write(zero[:pad[i]]) }
	section(secKey)
	bw.Write(key)
	section(secMeta)
	bw.Write(meta)
	section(secDbg)
	bw.Write(c.dbgID)
	section(secSyms)
	var nameOff uint32
	for _, s := range syms {
		binary.LittleEndian.PutUint64(b[0:], s.Addr)
		binary.LittleEndian.PutUint64(b[8:], s.Size)
		binary.LittleEndian.PutUint32(b[16:], nameOff)
		binary.LittleEndian.PutUint32(b[20:], uint32(len(s.Name)))
		bw.Write(b[:24])
		nameOff += uint32(len(s.Name))
	}
	section(secFdes)
	for _, f := range c.fdes {
		binary.LittleEndian.PutUint64(b[0:], f.start)
		binary.LittleEndian.PutUint64(b[8:], f.size)
		bw.Write(b[:16])
	}
	section(secFdeNames)
	for _, a := range fn {
		binary.LittleEndian.PutUint64(b[0:], a)
		binary.LittleEndian.PutUint32(b[8:], nameOff)
		binary.LittleEndian.PutUint32(b[12:], uint32(len(c.fdeNames[a])))
		bw.Write(b[:16])
		nameOff += uint32(len(c.fdeNames[a]))
	}
	section(secLoads)
	for _, p := range c.loads {
		binary.LittleEndian.PutUint32(b[0:], uint32(p.Type))
		binary.LittleEndian.PutUint32(b[4:], uint32(p.Flags))
		for i, v := range []uint64{p.Off, p.Vaddr, p.Paddr, p.Filesz, p.Memsz, p.Align} {
			binary.LittleEndian.PutUint64(b[8+8*i:], v)
		}
		bw.Write(b[:56])
	}
	section(secPLT)
	for _, r := range c.plt {
		binary.LittleEndian.PutUint64(b[0:], r.start)
		binary.LittleEndian.PutUint64(b[8:], r.end)
		bw.Write(b[:16])
	}
	section(secNames)
	for _, s := range syms {
		bw.WriteString(s.Name)
	}
	for _, a := range fn {
		bw.WriteString(c.fdeNames[a])
	}
	return bw.Flush()
}

// decodeTable checks a cache file's bytes against key and returns what it
// holds, its arrays views of data (ok false: not a usable entry). whole
// checks every entry's order and name bounds; without it (a mapped table,
// whose pages are read only where a search touches them) the order is not
// checked: a binary search stays within the entries whatever their order
// (the entry it ends on starts at or below the address and the next one
// above it), and ctab.at bounds-checks each name it reads.
func decodeTable(data, key []byte, whole bool) (c cached, ok bool) {
	if len(data) < headerSize || string(data[:8]) != tableMagic {
		return c, false
	}
	var sec [nSecs][]byte
	for i := range sec {
		off := binary.LittleEndian.Uint64(data[8+16*i:])
		n := binary.LittleEndian.Uint64(data[16+16*i:])
		if off%8 != 0 || off > uint64(len(data)) || n > uint64(len(data))-off {
			return c, false
		}
		sec[i] = data[off : off+n : off+n]
	}
	if string(sec[secKey]) != string(key) || len(sec[secSyms])%24 != 0 || len(sec[secFdes])%16 != 0 ||
		len(sec[secFdeNames])%16 != 0 || len(sec[secLoads])%56 != 0 || len(sec[secPLT])%16 != 0 {
		return c, false
	}
	for m := sec[secMeta]; len(m) > 0; {
		if len(m) < 4 || uint64(binary.LittleEndian.Uint32(m)) > uint64(len(m)-4) {
			return c, false
		}
		n := int(binary.LittleEndian.Uint32(m))
		c.meta = append(c.meta, string(m[4:4+n]))
		m = m[4+n:]
	}
	c.dbgID = sec[secDbg]
	if n := len(sec[secSyms]) / 24; n > 0 {
		c.tab.ents = unsafe.Slice((*centry)(unsafe.Pointer(&sec[secSyms][0])), n)
	}
	c.tab.names = sec[secNames]
	if n := len(sec[secFdes]) / 16; n > 0 {
		c.fdes = unsafe.Slice((*fdeRange)(unsafe.Pointer(&sec[secFdes][0])), n)
	}
	for i := range c.tab.ents {
		if !whole {
			break
		}
		e := &c.tab.ents[i]
		if i > 0 && e.addr < c.tab.ents[i-1].addr || uint64(e.off)+uint64(e.n) > uint64(len(c.tab.names)) {
			return cached{}, false // binary searches need sorted starts; names in bounds
		}
	}
	for i := 1; whole && i < len(c.fdes); i++ {
		if c.fdes[i].start < c.fdes[i-1].start {
			return cached{}, false
		}
	}
	for b := sec[secFdeNames]; len(b) > 0; b = b[16:] {
		off, n := binary.LittleEndian.Uint32(b[8:]), binary.LittleEndian.Uint32(b[12:])
		if uint64(off)+uint64(n) > uint64(len(c.tab.names)) {
			return cached{}, false
		}
		if c.fdeNames == nil {
			c.fdeNames = map[uint64]string{}
		}
		c.fdeNames[binary.LittleEndian.Uint64(b)] = string(c.tab.names[off : off+n])
	}
	for b := sec[secLoads]; len(b) > 0; b = b[56:] {
		u := func(i int) uint64 { return binary.LittleEndian.Uint64(b[8+8*i:]) }
		c.loads = append(c.loads, elf.ProgHeader{Type: elf.ProgType(binary.LittleEndian.Uint32(b)), Flags: elf.ProgFlag(binary.LittleEndian.Uint32(b[4:])),
			Off: u(0), Vaddr: u(1), Paddr: u(2), Filesz: u(3), Memsz: u(4), Align: u(5)})
	}
	for b := sec[secPLT]; len(b) > 0; b = b[16:] {
		c.plt = append(c.plt, addrRange{binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[8:])})
	}
	return c, true
}

// readTable reads dir's entry for key into memory (ok false: no usable
// entry). Read, not mapped: a cache table is compact, checked whole here
// and its names read as addresses are named, so every page is touched,
// and under shadow paging (a common hypervisor set-up) the first touch of
// each 4 KB page of a file mapping costs more than a copy into the heap's
// huge pages.
func readTable(dir string, key []byte) (c cached, ok bool) {
	f, size, ok := openTable(dir, key)
	if !ok {
		return c, false
	}
	defer f.Close()
	data := make([]byte, size)
	if _, err := f.ReadAt(data, 0); err != nil {
		return c, false
	}
	defer func() {
		if recover() != nil { // (decodeTable checks what it reads: never expected)
			c, ok = cached{}, false
		}
	}()
	return decodeTable(data, key, true)
}

// mapTable maps dir's entry for key and returns what it holds, searched
// where it lies (ok false: no usable entry). For a caller that names a
// few addresses of each module it loads: a search touches the pages of
// its path and of the names it finds, where reading a table copies all of
// it (a large program's is megabytes). The mapping is m's, unmapped by
// m.Release or when m is unreachable; a file cut short while mapped
// faults into a panic that loadModule and Module.Symbol recover.
func mapTable(dir string, key []byte, m *Module) (c cached, ok bool) {
	f, size, ok := openTable(dir, key)
	if !ok {
		return c, false
	}
	defer f.Close()
	mf := mapFile(f, size)
	if mf == nil {
		return c, false
	}
	defer faultsPanic()()
	defer func() {
		if recover() != nil {
			c, ok = cached{}, false
		}
		if !ok {
			_ = syscall.Munmap(mf.data)
		}
	}()
	c, ok = decodeTable(mf.data, key, false)
	if ok {
		mf.release(m)
	}
	return c, ok
}

// openTable opens dir's entry for key: a regular file of the user's, not
// a symbolic link, of a size a table can have.
func openTable(dir string, key []byte) (*os.File, int64, bool) {
	if dir == "" || key == nil {
		return nil, 0, false
	}
	f, err := os.OpenFile(cachePath(dir, key), os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, 0, false
	}
	fi, err := f.Stat()
	ok := err == nil && fi.Mode().IsRegular() && fi.Size() > 0 && fi.Size() <= maxTableSize
	if ok {
		st, isStat := fi.Sys().(*syscall.Stat_t)
		ok = isStat && int(st.Uid) == os.Geteuid()
	}
	if !ok {
		f.Close()
		return nil, 0, false
	}
	return f, fi.Size(), true
}

// maxTableSize bounds a cache file read (a kernel's table is ~6 MB).
const maxTableSize = 1 << 30

// writeTable stores an entry (best effort: a cache that cannot be written
// costs only the next run's parse).
func writeTable(dir string, key []byte, c *cached, syms []Sym) {
	if dir == "" || key == nil || !cacheDirOK(dir) {
		return
	}
	dst := cachePath(dir, key)
	tmp, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return
	}
	werr := encodeTable(tmp, key, c, syms)
	if cerr := tmp.Close(); werr != nil || cerr != nil || os.Rename(tmp.Name(), dst) != nil {
		os.Remove(tmp.Name())
		return
	}
	pruneCache(dir)
}

// pruneCache removes the oldest entries (by the time they were written)
// when dir holds more than maxCacheEntries or maxCacheBytes, down to three
// quarters of both, temporary files a killed writer left included.
func pruneCache(dir string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	type aged struct {
		name string
		mod  int64
		size int64
	}
	var all []aged
	var total int64
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() {
			all = append(all, aged{e.Name(), fi.ModTime().UnixNano(), fi.Size()})
			total += fi.Size()
		}
	}
	if len(all) <= maxCacheEntries && total <= maxCacheBytes {
		return
	}
	slices.SortFunc(all, func(a, b aged) int { return int(min(max(a.mod-b.mod, -1), 1)) })
	for len(all) > 0 && (len(all) > maxCacheEntries*3/4 || total > maxCacheBytes/4*3) {
		os.Remove(filepath.Join(dir, all[0].name))
		total -= all[0].size
		all = all[1:]
	}
}

// moduleFromCache fills m from dir's entry for the module file at path
// (fi its fstat), mapped or read (mapTable, readTable); false: no usable
// entry.
func moduleFromCache(dir, path string, fi os.FileInfo, m *Module, mapped bool) bool {
	key := moduleKey(path, fi)
	var c cached
	var ok bool
	if mapped {
		c, ok = mapTable(dir, key, m)
	} else {
		c, ok = readTable(dir, key)
	}
	if !ok || len(c.meta) != 5 || c.meta[3] != "" && string(debugIdent(strings.Split(c.meta[3], "\x00"))) != string(c.dbgID) {
		return false // (or the debug file appeared, went or changed since)
	}
	m.Source, m.Warning, m.dwPath, m.Stripped = c.meta[0], c.meta[1], c.meta[2], c.meta[4] == "1"
	if c.meta[3] != "" {
		m.debugFiles = strings.Split(c.meta[3], "\x00")
	}
	m.loads = c.loads
	m.plt = c.plt
	m.tab = table{fdes: c.fdes, fdeNames: c.fdeNames}
	m.tab.c = &c.tab
	return true
}

// moduleToCache stores m, parsed from the file at path (fi its fstat);
// debugFiles are the separate debug files looked for.
func moduleToCache(dir, path string, fi os.FileInfo, m *Module, debugFiles []string) {
	if dir == "" || m.Err != nil || m.tab.c != nil {
		return
	}
	c := cached{fdes: m.tab.fdes, fdeNames: m.tab.fdeNames, loads: m.loads, plt: m.plt}
	stripped := ""
	if m.Stripped {
		stripped = "1"
	}
	c.meta = []string{m.Source, m.Warning, m.dwPath, strings.Join(debugFiles, "\x00"), stripped}
	if len(debugFiles) > 0 {
		c.dbgID = debugIdent(debugFiles)
	}
	writeTable(dir, moduleKey(path, fi), &c, m.tab.syms)
}

// kernelFromCache returns the cached kernel table for kallsyms.
func kernelFromCache(dir string, kallsyms []byte) (*ctab, []kmod, bool) {
	c, ok := readTable(dir, kernelKey(kallsyms))
	if !ok || len(c.meta)%3 != 0 || len(c.fdes) > 0 || len(c.loads) > 0 {
		return nil, nil, false
	}
	var kmods []kmod
	for i := 0; i < len(c.meta); i += 3 {
		s, err1 := strconv.ParseUint(c.meta[i+1], 16, 64)
		e, err2 := strconv.ParseUint(c.meta[i+2], 16, 64)
		if err1 != nil || err2 != nil {
			return nil, nil, false
		}
		kmods = append(kmods, kmod{name: c.meta[i], start: s, end: e})
	}
	return &c.tab, kmods, true
}

// kernelToCache stores the kernel table parsed from kallsyms.
func kernelToCache(dir string, kallsyms []byte, syms symtab, kmods []kmod) {
	if dir == "" || len(syms) == 0 {
		return
	}
	var c cached
	for _, k := range kmods {
		c.meta = append(c.meta, k.name, strconv.FormatUint(k.start, 16), strconv.FormatUint(k.end, 16))
	}
	writeTable(dir, kernelKey(kallsyms), &c, syms)
}

// ReadBlob returns what dir holds under key in a caller's own format
// (WriteBlob's data) and when it was written; ok false when there is no
// usable entry (the same checks as a table's: the user's own regular
// file, not a symbolic link, at most max bytes). The caller checks the
// data as untrusted input.
func ReadBlob(dir string, key []byte, max int64) (data []byte, written time.Time, ok bool) {
	f, size, ok := openTable(dir, append([]byte("blob\x00"), key...))
	if !ok || size > max {
		if f != nil {
			f.Close()
		}
		return nil, time.Time{}, false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, time.Time{}, false
	}
	data = make([]byte, size)
	if _, err := io.ReadFull(f, data); err != nil {
		return nil, time.Time{}, false
	}
	return data, fi.ModTime(), true
}

// WriteBlob stores data under key in dir, as a table is (best effort:
// written whole and renamed into place, where the directory is the user's
// own and closed to others; counted in the directory's bounds).
func WriteBlob(dir string, key, data []byte) {
	if dir == "" || !cacheDirOK(dir) {
		return
	}
	dst := cachePath(dir, append([]byte("blob\x00"), key...))
	tmp, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return
	}
	_, werr := tmp.Write(data)
	if cerr := tmp.Close(); werr != nil || cerr != nil || os.Rename(tmp.Name(), dst) != nil {
		os.Remove(tmp.Name())
		return
	}
	pruneCache(dir)
}
