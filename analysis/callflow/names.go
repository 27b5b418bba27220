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
