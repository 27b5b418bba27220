package callflow

import (
	"fmt"
	"strings"

	"perfinsp/analysis/a2n"
	"perfinsp/format/trace"
	"perfinsp/internal/procmaps"
)

// Namer names function addresses of one process with A2N (the resolver
// post uses), from the /proc/PID/maps copy hookit wrote.
type Namer struct {
	pid   uint32
	r     *a2n.Resolver
	cache map[uint64]string
	names map[uint64]string // hookit_name's, first
}

// ProcessNamer names the ids of one process: hookit_name's names first,
// then A2N on its memory map.
func ProcessNamer(p *Process) *Namer {
	n := NewNamer(p.Info.PID, p.Maps)
	n.names = p.Names
	return n
}

// NewNamer feeds the executable mappings of maps to an A2N resolver.
func NewNamer(pid int, maps []byte) *Namer {
	r := a2n.New(nil)
	_ = procmaps.Executable(maps, func(m procmaps.Mapping) {
		if m.Path == "" {
			return // anonymous memory: nothing to name it from
		}
		r.Apply(&trace.Record{Major: trace.MajorMTE, Minor: trace.MTESegment,
			Fixed: []uint64{uint64(pid), m.Start, m.End - m.Start, m.Offset, uint64(m.Prot)}, Str: m.Path})
	})
	return &Namer{pid: uint32(pid), r: r, cache: map[uint64]string{}}
}

// Name returns the symbol at addr ("module+0xoff" when it has none).
func (n *Namer) Name(addr uint64) string {
	if s, ok := n.cache[addr]; ok {
		return s
	}
	if s, ok := n.names[addr]; ok {
		return s
	}
	s := fmt.Sprintf("0x%x", addr)
	if n.r != nil {
		res := n.r.Resolve(n.pid, addr, false)
		if res.Symbol != "" && res.Symbol != "<unknown>" {
			s = res.Symbol
			if res.Offset != 0 && !strings.Contains(s, "+0x") {
				s = fmt.Sprintf("%s+0x%x", s, res.Offset)
			}
		}
	}
	n.cache[addr] = s
	return s
}

// Entry is where a function's address is in its module's ELF file, for a
// pprof location: the file, its build id and the load segment holding it
// (virtual addresses start to limit, start at offset in the file), the
// file's virtual address of it (what objdump shows) and its source line.
type Entry struct {
	File, BuildID        string
	Start, Limit, Offset uint64
	Addr                 uint64
	Source               string
	Line                 int
}

// Entry places the function at addr (false: in no readable file, or
// named by hookit_name: an id, not an address).
func (n *Namer) Entry(addr uint64) (Entry, bool) {
	if _, ok := n.names[addr]; ok || n.r == nil {
		return Entry{}, false
	}
	l := n.r.Locate(n.pid, addr, false)
	path := l.Module()
	if path == "" || strings.HasPrefix(path, "[") {
		return Entry{}, false
	}
	m := n.r.LocModule(l)
	if m == nil || m.Err != nil {
		return Entry{}, false
	}
	va, ok := m.VAddr(l.FileOffset())
	if !ok {
		return Entry{}, false
	}
	vaddr, off, size, ok := m.LoadSegment(l.FileOffset())
	if !ok {
		return Entry{}, false
	}
	e := Entry{File: path, BuildID: m.BuildID(), Start: vaddr, Limit: vaddr + size, Offset: off, Addr: va}
	if file, line, ok := m.Line(va); ok {
		e.Source, e.Line = file, line
	}
	return e, true
}
