package main

import (
	"bufio"
	"fmt"
	"io"

	"golang.org/x/arch/x86/x86asm"

	"perfinsp/analysis/a2n"
	"perfinsp/analysis/annotate"
)

// ITrace's annotate view (--annotate FUNC on a trace with ITrace records):
// the exact count of every instruction of the function, and of every
// source line. The records give each block — from where a branch landed,
// along its fall-through chain, to its last instruction — and the
// instructions it ran; every instruction of the chain ran once per run of
// the block, and a rep string instruction once per iteration besides
// (callgrind's n + 1: the block's count says how many).

// span is one block as the records give it: its module, the file's
// address of its first instruction and the offset of its last (-1: not
// known, a thread's last block).
type span struct {
	mod   string
	start uint64
	last  int64
}

// spanCount is how often a span ran and the instructions it ran in all.
type spanCount struct {
	runs, insns uint64
}

// spans counts the blocks of a trace for annotate (Blocks.OnBlock).
type spans struct {
	by map[span]*spanCount
}

func newSpans() *spans { return &spans{by: map[span]*spanCount{}} }

func (s *spans) add(mod string, start uint64, last int64, count uint32) {
	k := span{mod, start, last}
	c := s.by[k]
	if c == nil {
		c = &spanCount{}
		s.by[k] = c
	}
	c.runs++
	c.insns += uint64(count)
}

// functions spreads the spans of every function named fn over their
// instructions, by module and symbol (in annotate.Sort's order); the
// instructions of spans that cannot be read or decoded are counted in
// lost.
func (s *spans) functions(cache *a2n.Cache, fn string) (fns []annotate.Function, lost uint64) {
	type fnKey struct {
		mod   string
		start uint64
	}
	byFn := map[fnKey]*annotate.Function{}
	for k, c := range s.by {
		mod := cache.Module(k.mod)
		if mod == nil || mod.Err != nil {
			continue
		}
		sym, ok := mod.SymbolAt(k.start)
		if !ok || sym.Name != fn {
			continue
		}
		a := byFn[fnKey{k.mod, sym.Addr}]
		if a == nil {
			a = &annotate.Function{Mod: mod, Sym: sym, At: map[uint64]uint64{}}
			byFn[fnKey{k.mod, sym.Addr}] = a
		}
		if !spread(mod, k, c, a.At) {
			lost += c.insns
			continue
		}
		a.Total += c.insns
	}
	for _, a := range byFn {
		if a.Total > 0 {
			fns = append(fns, *a)
		}
	}
	annotate.Sort(fns)
	return fns, lost
}

// maxSpan bounds the code read for one block: a block is at most 512
// instructions of at most 15 bytes.
const maxSpan = 512 * 15

// spread adds a span's counts to its instructions in at: each
// instruction from the first to the last once per run, the count's
// remainder (iterations) to the rep string instruction among them. A span
// whose last instruction is not known runs as far as its count goes.
// It reports false (and adds nothing) where the code cannot be read or
// decoded, or the count does not fit the chain.
func spread(mod *a2n.Module, k span, c *spanCount, at map[uint64]uint64) bool {
	ch, ok := readChain(mod, k, c)
	return ok && ch.spread(c, func(a, n uint64) { at[a] += n })
}

// chain is a span's instructions, from its first along the fall-through
// chain to its last: their addresses and the index of the first rep
// string instruction among them (-1: none).
type chain struct {
	addrs []uint64
	rep   int
}

// readChain decodes the chain of span k from mod's code: to its last
// instruction, or, when that is not known, as far as c's count goes (c is
// not looked at otherwise). It reports false where the code cannot be
// read or decoded, or the last instruction is not on the chain.
func readChain(mod *a2n.Module, k span, c *spanCount) (chain, bool) {
	n := uint64(maxSpan)
	if k.last >= 0 {
		n = min(uint64(k.last)+15, maxSpan)
	}
	code, err := mod.Code(k.start, n)
	if err != nil { // near the end of the segment: as much as there is
		lo, hi := uint64(0), n // lo readable, hi not
		for hi-lo > 1 {
			mid := (lo + hi) / 2
			if _, err := mod.Code(k.start, mid); err == nil {
				lo = mid
			} else {
				hi = mid
			}
		}
		if lo == 0 {
			return chain{}, false
		}
		if code, err = mod.Code(k.start, lo); err != nil {
			return chain{}, false
		}
	}
	ch := chain{rep: -1}
	for off := 0; off < len(code); {
		if k.last >= 0 && int64(off) > k.last {
			break
		}
		if k.last < 0 && uint64(len(ch.addrs))*c.runs >= c.insns {
			break
		}
		inst, err := x86asm.Decode(code[off:], 64)
		if err != nil || inst.Len == 0 {
			return chain{}, false
		}
		if ch.rep < 0 && isRepString(inst) {
			ch.rep = len(ch.addrs)
		}
		ch.addrs = append(ch.addrs, k.start+uint64(off))
		off += inst.Len
	}
	if len(ch.addrs) == 0 || k.last >= 0 && ch.addrs[len(ch.addrs)-1] != k.start+uint64(k.last) {
		return chain{}, false // the last instruction is not on the chain
	}
	return ch, true
}

// spread gives at each instruction of the chain and its count for c's
// runs: once per run, the remainder to the rep string instruction. It
// reports false (and gives nothing) when the count does not fit.
func (ch chain) spread(c *spanCount, at func(addr, n uint64)) bool {
	each := uint64(len(ch.addrs)) * c.runs
	if each > c.insns || each < c.insns && ch.rep < 0 {
		return false
	}
	for _, a := range ch.addrs {
		at(a, c.runs)
	}
	if ch.rep >= 0 {
		at(ch.addrs[ch.rep], c.insns-each)
	}
	return true
}

// isRepString reports whether inst is a rep-prefixed string instruction.
func isRepString(inst x86asm.Inst) bool {
	switch inst.Op {
	case x86asm.MOVSB, x86asm.MOVSW, x86asm.MOVSD, x86asm.MOVSQ, x86asm.STOSB, x86asm.STOSW, x86asm.STOSD, x86asm.STOSQ,
		x86asm.LODSB, x86asm.LODSW, x86asm.LODSD, x86asm.LODSQ, x86asm.CMPSB, x86asm.CMPSW, x86asm.CMPSD, x86asm.CMPSQ,
		x86asm.SCASB, x86asm.SCASW, x86asm.SCASD, x86asm.SCASQ, x86asm.INSB, x86asm.INSW, x86asm.INSD,
		x86asm.OUTSB, x86asm.OUTSW, x86asm.OUTSD:
	default:
		return false
	}
	for _, p := range inst.Prefix {
		switch p &^ x86asm.PrefixImplicit {
		case x86asm.PrefixREP, x86asm.PrefixREPN:
			return true
		}
	}
	return false
}

// writeAnnotate writes the ITrace sections of annotate.out for fn: the
// number of functions written (0 and an error when none).
func (p *itracePass) writeAnnotate(out io.Writer, fn string) (int, error) {
	if p.spans == nil || p.rep.Instructions == 0 {
		return 0, fmt.Errorf("annotate: the trace holds no ITrace records")
	}
	fns, lost := p.spans.functions(&p.r.Cache, fn)
	if len(fns) == 0 {
		if lost > 0 {
			return 0, fmt.Errorf("annotate: %d instructions of %s, none in code that could be read and decoded", lost, fn)
		}
		return 0, fmt.Errorf("annotate: no ITrace instructions in a function named %q (the names are itrace.out's)", fn)
	}
	w := bufio.NewWriter(out)
	aw := annotate.NewWriter(w, "Instrs", "instructions (ITrace)", p.rep.Instructions)
	for _, a := range fns {
		if err := aw.Function(a); err != nil {
			return 0, err
		}
	}
	if lost > 0 {
		fmt.Fprintf(w, "(%d more instructions of %s in blocks whose code could not be read or decoded)\n", lost, fn)
	}
	return len(fns), w.Flush()
}
