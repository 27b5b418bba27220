package a2n

import (
	"cmp"
	"debug/dwarf"
	"encoding/binary"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"syscall"
)

// Source lines through the table cache. A module's first Line in a run
// with a table cache (Cache.Dir) reads the line table of every compilation
// unit of its DWARF once and keeps it in the cache, keyed by the module's
// identity and its DWARF file's (a separate debug file's too); later runs
// read that file and search it in place. Opening the DWARF costs more
// than reading the tables: every debug section, compressed in most
// distributions' debug files and in Go binaries, is inflated whole
// (.debug_info, .debug_loclists); a cached table is a few MB read with
// one read and no parse. Without a table cache, Line reads the units that
// hold the addresses asked (module.go).
//
// The table is every line row of every sequence, by address; the end of
// a sequence is a row of its own, naming no file, so that an address
// between sequences (padding, code without lines) has no line.

// lineMagic starts every cached line table; the digit is the format version.
const lineMagic = "PIA2NLN1"

// noFile marks a sequence's end in a line table.
const noFile = ^uint32(0)

// lineTable is a module's whole line table: rows of 16 bytes (address,
// file index, line) by address, in a cache file mapped (or read into
// memory where it cannot be) or made from the DWARF.
type lineTable struct {
	rows   []byte
	files  []string
	mapped bool // rows lie in a mapping of the cache file (see lookup)
}

func (t *lineTable) n() int { return len(t.rows) / 16 }

func (t *lineTable) addr(i int) uint64 { return binary.LittleEndian.Uint64(t.rows[16*i:]) }

// lookup is find, a fault on a mapped table (its file shrunk under it)
// giving no line.
func (t *lineTable) lookup(va uint64) (file string, line int, ok bool) {
	if t.mapped {
		defer faultsPanic()()
		defer func() {
			if recover() != nil {
				file, line, ok = "", 0, false
			}
		}()
	}
	return t.find(va)
}

// find returns the line of va: the last row at or before it, unless that
// row ends a sequence.
func (t *lineTable) find(va uint64) (string, int, bool) {
	lo, hi := 0, t.n()
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if t.addr(mid) <= va {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo == 0 {
		return "", 0, false
	}
	r := t.rows[16*(lo-1):]
	f := binary.LittleEndian.Uint32(r[8:])
	if f == noFile || int(f) >= len(t.files) {
		return "", 0, false
	}
	return t.files[f], int(binary.LittleEndian.Uint32(r[12:])), true
}

// lineCacheKey is the key of m's line table: the module's identity and
// that of the file holding its DWARF now (nil: not cacheable).
func (m *Module) lineCacheKey() []byte { return m.dwarfCacheKey("lines") }

// dwarfCacheKey is the key of a table of kind made from m's DWARF.
func (m *Module) dwarfCacheKey(kind string) []byte {
	if m.linesDir == "" || m.linesKey == nil || m.dwPath == "" {
		return nil
	}
	fi, err := os.Stat(m.dwPath)
	if err != nil {
		return nil
	}
	id := fileIdent(fi)
	if id == nil {
		return nil
	}
	return append(append(append([]byte(kind+"\x00"), m.linesKey...), "\x00"+m.dwPath+"\x00"...), id...)
}

// cachedLines gives m its whole line table from the table cache, or reads
// it from the DWARF and stores it there (none when the DWARF cannot be
// read); false: no table cache (Line then reads the units it needs).
func (m *Module) cachedLines() bool {
	key := m.lineCacheKey()
	if key == nil {
		return false
	}
	if t, ok := readLineTable(m.linesDir, key); ok {
		m.lineTab = t
		return true
	}
	m.loadLineIndex()
	if m.dw == nil {
		return true
	}
	t := m.allLines()
	m.dw = nil // (the units are not read one by one: the table has them all)
	m.lineTab = t
	writeLineTable(m.linesDir, key, t)
	return true
}

// allLines reads every unit's line table.
func (m *Module) allLines() *lineTable {
	type row struct {
		addr       uint64
		file, line uint32
	}
	var rows []row
	fileIdx := map[string]uint32{}
	t := &lineTable{}
	// The end of each of the units' address ranges ends the rows before
	// it too: a sequence may run on over the padding between two
	// functions, which its unit's ranges leave out (a unit's row at such
	// an end covers nothing of it).
	rangeEnds := map[[2]uint64]bool{}
	for i, rg := range m.cuRanges {
		if i+1 < len(m.cuRanges) && m.cuRanges[i+1].low == rg.high && m.cuRanges[i+1].cu == rg.cu {
			continue // the unit's next range goes on from here
		}
		rangeEnds[[2]uint64{uint64(rg.cu), rg.high}] = true
	}
	for i := range m.cus {
		cu := &m.cus[i]
		r := m.dw.Reader()
		r.Seek(cu.off)
		e, err := r.Next()
		if err != nil || e == nil {
			continue
		}
		lr, err := m.dw.LineReader(e)
		if err != nil || lr == nil {
			continue
		}
		var le dwarf.LineEntry
		var lastName string
		var lastIdx uint32
		have := false
		seq := len(rows) // where the sequence read starts in rows
		for lr.Next(&le) == nil {
			if le.EndSequence {
				// rows at the end's address cover nothing
				for len(rows) > seq && rows[len(rows)-1].addr >= le.Address {
					rows = rows[:len(rows)-1]
				}
				rows = append(rows, row{le.Address, noFile, 0})
				seq = len(rows)
				continue
			}
			if le.File == nil || rangeEnds[[2]uint64{uint64(i), le.Address}] {
				continue
			}
			name := le.File.Name
			if !have || name != lastName {
				full := name
				if cu.compDir != "" && !filepath.IsAbs(name) {
					full = filepath.Join(cu.compDir, name)
				}
				idx, ok := fileIdx[full]
				if !ok {
					idx = uint32(len(t.files))
					fileIdx[full] = idx
					t.files = append(t.files, full)
				}
				lastName, lastIdx, have = name, idx, true
			}
			rows = append(rows, row{le.Address, lastIdx, uint32(min(max(le.Line, 0), 1<<31))})
		}
	}
	for rg := range rangeEnds {
		rows = append(rows, row{rg[1], noFile, 0})
	}
	// by address; at one address a sequence's end before the rows of the
	// sequence that starts there, rows of one address in their order
	slices.SortStableFunc(rows, func(a, b row) int {
		if c := cmp.Compare(a.addr, b.addr); c != 0 {
			return c
		}
		end := func(r row) int {
			if r.file == noFile {
				return 0
			}
			return 1
		}
		return cmp.Compare(end(a), end(b))
	})
	t.rows = make([]byte, 16*len(rows))
	for i, r := range rows {
		b := t.rows[16*i:]
		binary.LittleEndian.PutUint64(b, r.addr)
		binary.LittleEndian.PutUint32(b[8:], r.file)
		binary.LittleEndian.PutUint32(b[12:], r.line)
	}
	return t
}

// A cached line table: lineMagic, the key's length (u32) and the key, the
// number of files (u32), each file's length (u32) and bytes, the number
// of rows (u64), the rows.

// writeLineTable stores t under key (best effort, as writeTable).
func writeLineTable(dir string, key []byte, t *lineTable) {
	if !cacheDirOK(dir) {
		return
	}
	storeCachedTable(dir, key, cachedTableHeadBytes(lineMagic, key, t.files, uint64(t.n())), t.rows)
}

// cachedTableHeadBytes is the head cachedTableHead reads: magic, the key,
// the strings, the number of rows to follow.
func cachedTableHeadBytes(magic string, key []byte, strs []string, rows uint64) []byte {
	b := append([]byte(magic), binary.LittleEndian.AppendUint32(nil, uint32(len(key)))...)
	b = append(b, key...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(strs)))
	for _, s := range strs {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(s)))
		b = append(b, s...)
	}
	return binary.LittleEndian.AppendUint64(b, rows)
}

// storeCachedTable writes the parts of a table into dir under key: a
// temporary file renamed into place (a reader sees a whole table or
// none), best effort.
func storeCachedTable(dir string, key []byte, parts ...[]byte) {
	tmp, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return
	}
	var werr error
	for _, p := range parts {
		if werr == nil {
			_, werr = tmp.Write(p)
		}
	}
	if cerr := tmp.Close(); werr != nil || cerr != nil || os.Rename(tmp.Name(), cachePath(dir, key)) != nil {
		os.Remove(tmp.Name())
		return
	}
	pruneCache(dir)
}

// openCachedTable opens dir's table for key when it is the user's own
// regular file under the size bound.
func openCachedTable(dir string, key []byte) (*os.File, int64, bool) {
	f, err := os.OpenFile(cachePath(dir, key), os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, 0, false
	}
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() || fi.Size() <= 0 || fi.Size() > maxTableSize {
		f.Close()
		return nil, 0, false
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Geteuid() {
		f.Close()
		return nil, 0, false
	}
	return f, fi.Size(), true
}

// readLineTable reads dir's line table for key, checked whole: the key,
// every length in bounds, the rows by address, every file index known.
func readLineTable(dir string, key []byte) (*lineTable, bool) {
	f, size, ok := openCachedTable(dir, key)
	if !ok {
		return nil, false
	}
	defer f.Close()
	// Mapped, not read: a Go binary's table is megabytes, of which a
	// profile's lookups touch a few pages (reading it was a tenth of a
	// post --pprof of a Go program's trace: the copy and the zeroed
	// memory it went to). The mapping goes with the table.
	var data []byte
	if mf := mapFile(f, size); mf != nil {
		data = mf.data
		t, ok := parseLineTable(data, key)
		if !ok {
			_ = syscall.Munmap(mf.data)
			return nil, false
		}
		t.mapped = true
		runtime.AddCleanup(t, func(b []byte) { _ = syscall.Munmap(b) }, mf.data)
		return t, true
	}
	data = make([]byte, size)
	if _, err := f.ReadAt(data, 0); err != nil {
		return nil, false
	}
	return parseLineTable(data, key)
}

// cachedTableHead reads what every cached table made from DWARF begins
// with, checked: magic, the key (another module's table, or an older
// version's, is not this one), a list of strings, and the number of rows
// of rowSize bytes that must fill the rest exactly, which it returns (the
// caller checks the rows' fields).
func cachedTableHead(data []byte, magic string, key []byte, rowSize uint64) (strs []string, rows []byte, ok bool) {
	take := func(n uint64) []byte {
		if n > uint64(len(data)) {
			return nil
		}
		b := data[:n]
		data = data[n:]
		return b
	}
	u32 := func() (uint64, bool) {
		b := take(4)
		if b == nil {
			return 0, false
		}
		return uint64(binary.LittleEndian.Uint32(b)), true
	}
	if string(take(uint64(len(magic)))) != magic {
		return nil, nil, false
	}
	kl, ok := u32()
	if !ok || string(take(kl)) != string(key) {
		return nil, nil, false
	}
	ns, ok := u32()
	if !ok || ns > uint64(len(data))/4 {
		return nil, nil, false
	}
	strs = make([]string, 0, ns)
	for range ns {
		l, ok := u32()
		b := take(l)
		if !ok || b == nil && l > 0 {
			return nil, nil, false
		}
		strs = append(strs, string(b))
	}
	nb := take(8)
	if nb == nil {
		return nil, nil, false
	}
	if n := binary.LittleEndian.Uint64(nb); n > uint64(len(data))/rowSize || uint64(len(data)) != rowSize*n {
		return nil, nil, false
	}
	return strs, data, true
}

// parseLineTable checks a cached line table whole (see readLineTable);
// the table's rows are data's. A mapped file that shrinks under it
// faults: a panic here, recovered as a table not read.
func parseLineTable(data []byte, key []byte) (t *lineTable, ok bool) {
	defer faultsPanic()()
	defer func() {
		if recover() != nil {
			t, ok = nil, false
		}
	}()
	files, rows, ok := cachedTableHead(data, lineMagic, key, 16)
	if !ok {
		return nil, false
	}
	nf := uint64(len(files))
	t = &lineTable{files: files, rows: rows}
	// every row checked, a row after the other (no index to multiply and
	// check against the table's length: a Go binary's table is hundreds
	// of thousands of rows, checked at each run)
	var last uint64
	for r := rows; len(r) >= 16; r = r[16:] {
		a, fl := binary.LittleEndian.Uint64(r), binary.LittleEndian.Uint32(r[8:])
		if a < last || fl != noFile && uint64(fl) >= nf {
			return nil, false
		}
		last = a
	}
	return t, true
}
