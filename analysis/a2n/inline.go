package a2n

import (
	"debug/dwarf"
	"debug/elf"
	"path/filepath"
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

// inlineInfo is what InlineCalls reads of a module's DWARF: the units,
// indexed by their ranges as for Line, each unit's tree of inlined calls
// read when one of its addresses is first asked for.
type inlineInfo struct {
	mu     sync.Mutex
	loaded bool
	dw     *dwarf.Data
	cus    []inlineCU
	ranges []cuRange // by address
	names  map[dwarf.Offset]string
}

type inlineCU struct {
	off   dwarf.Offset
	read  bool
	roots []inlineNode // a range of a function each, by address
}

// inlineNode is an address range of a function or of an inlined call,
// with the calls inlined in it.
type inlineNode struct {
	low, high uint64
	call      InlineCall
	kids      *[]inlineNode
}

// InlineCalls returns the calls inlined at virtual address va, outermost
// first, from DWARF's DW_TAG_inlined_subroutine entries (nil when the
// address is in none, or the module has no DWARF). An untrusted file's
// malformed DWARF gives nil.
func (m *Module) InlineCalls(va uint64) (calls []InlineCall) {
	in := &m.inl
	in.mu.Lock()
	defer in.mu.Unlock()
	defer func() {
		if recover() != nil {
			calls = nil
		}
	}()
	if !in.loaded {
		in.loaded = true
		m.loadInlineIndex()
	}
	i := sort.Search(len(in.ranges), func(i int) bool { return in.ranges[i].low > va }) - 1
	if i < 0 || va >= in.ranges[i].high {
		return nil
	}
	cu := &in.cus[in.ranges[i].cu]
	if !cu.read {
		cu.read = true
		m.readInlineTree(cu)
	}
	j := sort.Search(len(cu.roots), func(j int) bool { return cu.roots[j].low > va }) - 1
	if j < 0 || va >= cu.roots[j].high {
		return nil
	}
	for n := &cu.roots[j]; n.kids != nil; {
		var next *inlineNode
		for k := range *n.kids {
			if c := &(*n.kids)[k]; c.low <= va && va < c.high {
				next = c
				break
			}
		}
		if next == nil {
			break
		}
		calls = append(calls, next.call)
		n = next
	}
	return calls
}

// loadInlineIndex opens the module's DWARF and indexes its units by their
// address ranges.
func (m *Module) loadInlineIndex() {
	in := &m.inl
	if m.dwPath == "" {
		return
	}
	file, _, err := openChecked(m.dwPath, MaxModuleSize, false)
	if err != nil {
		return
	}
	defer file.Close()
	f, err := elf.NewFile(file)
	if err != nil {
		return
	}
	if in.dw, err = f.DWARF(); err != nil {
		return
	}
	r := in.dw.Reader()
	for {
		e, err := r.Next()
		if err != nil || e == nil {
			break
		}
		if e.Tag == dwarf.TagCompileUnit {
			in.cus = append(in.cus, inlineCU{off: e.Offset})
			if rs, err := in.dw.Ranges(e); err == nil {
				for _, rg := range rs {
					if rg[1] > rg[0] {
						in.ranges = append(in.ranges, cuRange{rg[0], rg[1], len(in.cus) - 1})
					}
				}
			}
		}
		r.SkipChildren()
	}
	sort.Slice(in.ranges, func(i, j int) bool { return in.ranges[i].low < in.ranges[j].low })
}

// readInlineTree reads a unit's functions and the calls inlined in them.
func (m *Module) readInlineTree(cu *inlineCU) {
	in := &m.inl
	r := in.dw.Reader()
	r.Seek(cu.off)
	e, err := r.Next()
	if err != nil || e == nil || !e.Children {
		return
	}
	var files []*dwarf.LineFile
	if lr, err := in.dw.LineReader(e); err == nil && lr != nil {
		files = lr.Files()
	}
	compDir, _ := e.Val(dwarf.AttrCompDir).(string)
	fileName := func(e *dwarf.Entry) string {
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
	var roots []inlineNode
	// walk reads the children of the entry just read, adding the ranges
	// of functions to roots and those of inlined calls to kids (the
	// enclosing function's or call's; nil outside any).
	var walk func(kids *[]inlineNode)
	walk = func(kids *[]inlineNode) {
		for {
			e, err := r.Next()
			if err != nil || e == nil || e.Tag == 0 {
				return
			}
			inner := kids
			switch {
			case e.Tag == dwarf.TagSubprogram:
				inner = &[]inlineNode{}
				m.addRanges(&roots, e, InlineCall{}, inner)
			case e.Tag == dwarf.TagInlinedSubroutine && kids != nil:
				line, _ := e.Val(dwarf.AttrCallLine).(int64)
				call := InlineCall{Function: m.originName(e), File: fileName(e), Line: int(line)}
				inner = &[]inlineNode{}
				m.addRanges(kids, e, call, inner)
			}
			if e.Children {
				walk(inner)
			}
		}
	}
	walk(nil)
	sort.Slice(roots, func(i, j int) bool { return roots[i].low < roots[j].low })
	cu.roots = roots
}

// addRanges adds a node for each of e's address ranges to to.
func (m *Module) addRanges(to *[]inlineNode, e *dwarf.Entry, call InlineCall, kids *[]inlineNode) {
	rs, err := m.inl.dw.Ranges(e)
	if err != nil {
		return
	}
	for _, rg := range rs {
		if rg[1] > rg[0] {
			*to = append(*to, inlineNode{low: rg[0], high: rg[1], call: call, kids: kids})
		}
	}
}

// originName is the name of the function an inlined call's entry calls:
// the linkage name (demangled) or else the name of its abstract origin,
// following DW_AT_abstract_origin and DW_AT_specification.
func (m *Module) originName(e *dwarf.Entry) string {
	in := &m.inl
	off, ok := e.Val(dwarf.AttrAbstractOrigin).(dwarf.Offset)
	if !ok {
		return "?"
	}
	if name, ok := in.names[off]; ok {
		return name
	}
	if in.names == nil {
		in.names = map[dwarf.Offset]string{}
	}
	name := ""
	r := in.dw.Reader()
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
	in.names[off] = name
	return name
}
