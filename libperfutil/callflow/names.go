package callflow

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"perfinsp/libperfutil/a2n"
	"perfinsp/libperfutil/trace"
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
	sc := bufio.NewScanner(bytes.NewReader(maps))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 6 || !strings.Contains(f[1], "x") {
			continue
		}
		lo, hi, ok := strings.Cut(f[0], "-")
		if !ok {
			continue
		}
		start, e1 := strconv.ParseUint(lo, 16, 64)
		end, e2 := strconv.ParseUint(hi, 16, 64)
		off, e3 := strconv.ParseUint(f[2], 16, 64)
		if e1 != nil || e2 != nil || e3 != nil || end <= start {
			continue
		}
		path := strings.Join(f[5:], " ")
		r.Apply(&trace.Record{Major: trace.MajorMTE, Minor: trace.MTESegment,
			Fixed: []uint64{uint64(pid), start, end - start, off, 5}, Str: path})
	}
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
