package a2n

import (
	"cmp"
	"debug/dwarf"
	"debug/elf"
	"encoding/binary"
	"path/filepath"
	"slices"
	"sort"
	"sync"
)

// InlineCall is one call that the compiler inlined, enclosing an address:
// the function inlined (Function) and where its caller called it (File,
// Line). The function's own line at the address is the innermost call's
// Function at the address's source line (Line); its caller the next
// call's Function, or the symbol when it is the outermost.
type InlineCall struct {
	Function string
	File     string
	Line     int
}

// The calls inlined in a module are read from its DWARF's
// DW_TAG_inlined_subroutine entries, every unit's at the module's first
// InlineCalls, and kept as one table: an address range per node, each
// node an inlined call whose parent (the call it was inlined into, or
// none) encloses it. The nodes are sorted by the start of their range,
// a parent before its children; as ranges are nested or apart, the
// calls enclosing an address are the last node starting at or before it
// and those of its ancestors that hold it. With a table cache the table
// is kept there beside the line table (keyed alike), so that later runs
// do not inflate the DWARF again.

// inlineMagic starts every cached inline table; the digit is the format version.
const inlineMagic = "PIA2NIL1"

// inlineNode is 32 bytes in a cached table: low, high, parent (-1:
// none), the function's name, the call's file (indexes into strs) and
// the call's line.
type inlineNode struct {
	low, high        uint64
	parent           int32
	name, file, line uint32
}

type inlineTable struct {
	nodes []inlineNode
	strs  []string
}

// inlineInfo is a module's inline table, read on first use.
type inlineInfo struct {
	mu     sync.Mutex
	loaded bool
	t      *inlineTable
}

// InlineCalls returns the calls inlined at virtual address va, outermost
// first (nil when the address is in none, or the module has no DWARF).
// An untrusted file's malformed DWARF gives none.
func (m *Module) InlineCalls(va uint64) []InlineCall {
	in := &m.inl
	in.mu.Lock()
	defer in.mu.Unlock()
	if !in.loaded {
		in.loaded = true
		in.t = m.loadInlineTable()
	}
	if in.t == nil {
		return nil
	}
	return in.t.calls(va)
}

// calls are the calls enclosing va, outermost first.
func (t *inlineTable) calls(va uint64) []InlineCall {
	i := sort.Search(len(t.nodes), func(i int) bool { return t.nodes[i].low > va }) - 1
	for i >= 0 && va >= t.nodes[i].high {
		i = int(t.nodes[i].parent)
	}
	var out []InlineCall
	for ; i >= 0; i = int(t.nodes[i].parent) {
		n := &t.nodes[i]
		out = append(out, InlineCall{Function: t.strs[n.name], File: t.strs[n.file], Line: int(n.line)})
	}
	slices.Reverse(out)
	return out
}

// loadInlineTable reads m's inline table from the table cache, or from
// its DWARF (then stored in the cache); nil when it has none.
func (m *Module) loadInlineTable() *inlineTable {
	key := m.dwarfCacheKey("inline")
	if key != nil {
		if t, ok := readInlineTable(m.linesDir, key); ok {
			return t
		}
	}
	t := m.readInlineDWARF()
	if t != nil && key != nil {
		writeInlineTable(m.linesDir, key, t)
	}
	return t
}

// readInlineDWARF reads every unit's inlined calls from m's DWARF.
func (m *Module) readInlineDWARF() (t *inlineTable) {
	defer func() {
		if recover() != nil { // an untrusted file's malformed DWARF
			t = nil
		}
	}()
	if m.dwPath == "" {
		return nil
	}
	file, _, err := openChecked(m.dwPath, MaxModuleSize, false)
	if err != nil {
		return nil
	}
	defer file.Close()
	f, err := elf.NewFile(file)
	if err != nil {
		return nil
	}
	dw, err := f.DWARF()
	if err != nil {
		return nil
	}
	b := &inlineBuilder{dw: dw, t: &inlineTable{}, ids: map[string]uint32{}, names: map[dwarf.Offset]uint32{}}
	r := dw.Reader()
	for {
		e, err := r.Next()
		if err != nil || e == nil {
			break
		}
		if e.Tag == dwarf.TagCompileUnit && e.Children {
			b.unit(r, e)
		} else {
			r.SkipChildren()
		}
	}
	return b.finish()
}

// inlineBuilder collects the inlined calls' ranges of a module's units.
type inlineBuilder struct {
	dw    *dwarf.Data
	t     *inlineTable
	depth []int // each node's depth in its function
	ids   map[string]uint32
	names map[dwarf.Offset]uint32
}

func (b *inlineBuilder) str(s string) uint32 {
	id, ok := b.ids[s]
	if !ok {
		id = uint32(len(b.t.strs))
		b.ids[s] = id
		b.t.strs = append(b.t.strs, s)
	}
	return id
}

// unit reads the entries of unit cu (just read by r) and its children.
func (b *inlineBuilder) unit(r *dwarf.Reader, cu *dwarf.Entry) {
	var files []*dwarf.LineFile
	if lr, err := b.dw.LineReader(cu); err == nil && lr != nil {
		files = lr.Files()
	}
	compDir, _ := cu.Val(dwarf.AttrCompDir).(string)
	fileOf := func(e *dwarf.Entry) string {
		i, ok := e.Val(dwarf.AttrCallFile).(int64)
		if !ok || i < 0 || i >= int64(len(files)) || files[i] == nil {
			return ""
		}
		name := files[i].Name
		if compDir != "" && !filepath.IsAbs(name) {
			name = filepath.Join(compDir, name)
		}
		return name
	}
	// walk reads the children of the entry just read, at a depth of
	// inlined calls (-1: outside any function)
	var walk func(depth int)
	walk = func(depth int) {
		for {
			e, err := r.Next()
			if err != nil || e == nil || e.Tag == 0 {
				return
			}
			inner := depth
			switch {
			case e.Tag == dwarf.TagSubprogram:
				inner = 0
			case e.Tag == dwarf.TagInlinedSubroutine && depth >= 0:
				inner = depth + 1
				line, _ := e.Val(dwarf.AttrCallLine).(int64)
				b.add(e, inner, b.name(e), b.str(fileOf(e)), uint32(min(max(line, 0), 1<<31)))
			}
			if e.Children {
				walk(inner)
			}
		}
	}
	walk(-1)
}

// add adds a node for each of e's address ranges.
func (b *inlineBuilder) add(e *dwarf.Entry, depth int, name, file, line uint32) {
	rs, err := b.dw.Ranges(e)
	if err != nil {
		return
	}
	for _, rg := range rs {
		if rg[1] > rg[0] {
			b.t.nodes = append(b.t.nodes, inlineNode{low: rg[0], high: rg[1], parent: -1, name: name, file: file, line: line})
			b.depth = append(b.depth, depth)
		}
	}
}

// finish sorts the nodes (by start, the outer of two starting together
// first) and links each to the innermost node before it that holds it.
func (b *inlineBuilder) finish() *inlineTable {
	t := b.t
	if len(t.nodes) == 0 {
		return nil
	}
	order := make([]int, len(t.nodes))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(x, y int) int {
		if c := cmp.Compare(t.nodes[x].low, t.nodes[y].low); c != 0 {
			return c
		}
		return cmp.Compare(b.depth[x], b.depth[y])
	})
	nodes := make([]inlineNode, len(order))
	var open []int32
	for i, o := range order {
		n := t.nodes[o]
		for len(open) > 0 {
			p := &nodes[open[len(open)-1]]
			if p.low <= n.low && n.high <= p.high {
				break
			}
			open = open[:len(open)-1]
		}
		n.parent = -1
		if len(open) > 0 {
			n.parent = open[len(open)-1]
		}
		nodes[i] = n
		open = append(open, int32(i))
	}
	t.nodes = nodes
	return t
}

// name is the name of the function an inlined call's entry calls: the
// linkage name (demangled) or else the name of its abstract origin,
// following DW_AT_abstract_origin and DW_AT_specification.
func (b *inlineBuilder) name(e *dwarf.Entry) uint32 {
	off, ok := e.Val(dwarf.AttrAbstractOrigin).(dwarf.Offset)
	if !ok {
		return b.str("?")
	}
	if id, ok := b.names[off]; ok {
		return id
	}
	name := ""
	r := b.dw.Reader()
	for hop, at := 0, off; hop < 8; hop++ {
		r.Seek(at)
		o, err := r.Next()
		if err != nil || o == nil {
			break
		}
		if ln, ok := o.Val(dwarf.AttrLinkageName).(string); ok {
			name = demangled(ln)
			break
		}
		if n, ok := o.Val(dwarf.AttrName).(string); ok && name == "" {
			name = n
		}
		next, ok := o.Val(dwarf.AttrAbstractOrigin).(dwarf.Offset)
		if !ok {
			if next, ok = o.Val(dwarf.AttrSpecification).(dwarf.Offset); !ok {
				break
			}
		}
		at = next
	}
	if name == "" {
		name = "?"
	}
	id := b.str(name)
	b.names[off] = id
	return id
}

// A cached inline table: inlineMagic, the key's length (u32) and the key,
// the number of strings (u32), each string's length (u32) and bytes, the
// number of nodes (u64), the nodes (32 bytes each, as inlineNode).

// writeInlineTable stores t under key (best effort, as writeTable).
func writeInlineTable(dir string, key []byte, t *inlineTable) {
	if !cacheDirOK(dir) {
		return
	}
	var b []byte
	for _, n := range t.nodes {
		b = binary.LittleEndian.AppendUint64(b, n.low)
		b = binary.LittleEndian.AppendUint64(b, n.high)
		b = binary.LittleEndian.AppendUint32(b, uint32(n.parent))
		b = binary.LittleEndian.AppendUint32(b, n.name)
		b = binary.LittleEndian.AppendUint32(b, n.file)
		b = binary.LittleEndian.AppendUint32(b, n.line)
	}
	storeCachedTable(dir, key, cachedTableHeadBytes(inlineMagic, key, t.strs, uint64(len(t.nodes))), b)
}

// readInlineTable reads dir's inline table for key (the user's own
// regular file, under the size bound), checked whole by parseInlineTable.
func readInlineTable(dir string, key []byte) (*inlineTable, bool) {
	f, size, ok := openCachedTable(dir, key)
	if !ok {
		return nil, false
	}
	defer f.Close()
	data := make([]byte, size)
	if _, err := f.ReadAt(data, 0); err != nil {
		return nil, false
	}
	return parseInlineTable(data, key)
}

// parseInlineTable checks a cached inline table whole: the key, every
// length in bounds, every string index known, the nodes by start, each
// node's range not empty and held by its parent's, an earlier node.
func parseInlineTable(data, key []byte) (*inlineTable, bool) {
	strs, data, ok := cachedTableHead(data, inlineMagic, key, 32)
	if !ok {
		return nil, false
	}
	ns := uint64(len(strs))
	t := &inlineTable{strs: strs}
	nn := uint64(len(data)) / 32
	t.nodes = make([]inlineNode, nn)
	for i := range t.nodes {
		r := data[32*i:]
		n := inlineNode{low: binary.LittleEndian.Uint64(r), high: binary.LittleEndian.Uint64(r[8:]),
			parent: int32(binary.LittleEndian.Uint32(r[16:])), name: binary.LittleEndian.Uint32(r[20:]),
			file: binary.LittleEndian.Uint32(r[24:]), line: binary.LittleEndian.Uint32(r[28:])}
		if n.low >= n.high || uint64(n.name) >= ns || uint64(n.file) >= ns || n.parent < -1 || int(n.parent) >= i ||
			i > 0 && n.low < t.nodes[i-1].low {
			return nil, false
		}
		if n.parent >= 0 {
			if p := &t.nodes[n.parent]; n.low < p.low || n.high > p.high {
				return nil, false
			}
		}
		t.nodes[i] = n
	}
	return t, true
}
