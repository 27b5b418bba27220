package tprof

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"golang.org/x/arch/x86/x86asm"

	"perfinsp/analysis/a2n"
)

// WriteAnnotate writes the annotated disassembly of every function named
// fn that has ticks (perf annotate's view): each of its instructions
// (x86-64, AT&T syntax as objdump prints it) with the ticks at its
// address and their share of the function's, and above each run of
// instructions of one source line that line's text, from the module's
// DWARF and the source file when it is readable. It needs a report built
// with addresses (BuildWithAddresses).
func (rep *Report) WriteAnnotate(out io.Writer, fn string) error {
	a := rep.addrs
	if a == nil {
		return fmt.Errorf("annotate: the report has no addresses (built without them)")
	}
	type fnKey struct {
		module string
		start  uint64 // the symbol's address in the module
	}
	type fnTicks struct {
		mod   *a2n.Module
		sym   a2n.Sym
		total uint64
		at    map[uint64]uint64 // ticks by virtual address
	}
	fns := map[fnKey]*fnTicks{}
	other := uint64(0) // ticks of fn with no module to read
	for i := int32(0); i < a.nent; i++ {
		e := &a.entries[i/entryBlock][i%entryBlock]
		if rep.res[a.names[e.res]].Symbol != fn {
			continue
		}
		l := a.loc(e.res)
		var mod *a2n.Module
		if l.Module() != "" {
			mod = a.r.LocModule(*l)
		}
		if mod == nil || mod.Err != nil {
			other += uint64(e.n)
			continue
		}
		sym, va, ok := mod.Symbol(l.FileOffset())
		if !ok {
			other += uint64(e.n)
			continue
		}
		k := fnKey{l.Module(), sym.Addr}
		f := fns[k]
		if f == nil {
			f = &fnTicks{mod: mod, sym: sym, at: map[uint64]uint64{}}
			fns[k] = f
		}
		f.total += uint64(e.n)
		f.at[va] += uint64(e.n)
	}
	if len(fns) == 0 {
		if other > 0 {
			return fmt.Errorf("annotate: %s has %d ticks, none in a module whose code can be read (kernel, JIT or a missing file)", fn, other)
		}
		return fmt.Errorf("annotate: no ticks in a function named %q (the names are tprof.out's SYM rows)", fn)
	}
	list := make([]*fnTicks, 0, len(fns))
	for _, f := range fns {
		list = append(list, f)
	}
	sort.Slice(list, func(i, j int) bool {
		if list[i].total != list[j].total {
			return list[i].total > list[j].total
		}
		return list[i].mod.Path < list[j].mod.Path
	})
	w := bufio.NewWriter(out)
	src := sourceFiles{}
	for _, f := range list {
		if err := writeAnnotated(w, f.mod, f.sym, f.at, f.total, rep.Total, src); err != nil {
			return err
		}
	}
	return w.Flush()
}

// writeAnnotated writes one function's annotated disassembly.
func writeAnnotated(w *bufio.Writer, mod *a2n.Module, sym a2n.Sym, at map[uint64]uint64, total, all uint64, src sourceFiles) error {
	size := sym.Size
	for va := range at { // (a symbol without a size: up to the last address with ticks)
		if va >= sym.Addr && va-sym.Addr+16 > size && sym.Size == 0 {
			size = va - sym.Addr + 16
		}
	}
	code, err := mod.Code(sym.Addr, size)
	if err == nil && len(code) == 0 {
		err = fmt.Errorf("no code at %#x (a symbol of size %d)", sym.Addr, sym.Size)
	}
	if err != nil {
		return fmt.Errorf("annotate %s: %w", sym.Name, err)
	}
	fmt.Fprintf(w, "Percent | Ticks    Address   %s  (%s, %d ticks, %.2f%% of all)\n", sym.Name, mod.Path, total, pct(total, all))
	fmt.Fprintln(w, "--------+-------------------------------------------------------------------")
	lastFile, lastLine := "", -1
	for off := uint64(0); off < uint64(len(code)); {
		va := sym.Addr + off
		if file, line, ok := mod.Line(va); ok && (file != lastFile || line != lastLine) {
			lastFile, lastLine = file, line
			fmt.Fprintf(w, "        :          %s:%d  %s\n", shortFile(file), line, src.line(file, line))
		}
		inst, err := x86asm.Decode(code[off:], 64)
		text, n := "", inst.Len
		if err != nil || n == 0 {
			text, n = fmt.Sprintf("(bad) %02x", code[off]), 1
		} else {
			text = x86asm.GNUSyntax(inst, va, nil)
		}
		if t := at[va]; t > 0 {
			fmt.Fprintf(w, "%7.2f : %8d  %8x:  %s\n", pct(t, total), t, va, text)
		} else {
			fmt.Fprintf(w, "        :           %8x:  %s\n", va, text)
		}
		off += uint64(n)
	}
	fmt.Fprintln(w)
	return nil
}

func shortFile(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[i+1:]
	}
	return p
}

// sourceFiles are the source files read so far, by path (nil: unreadable).
type sourceFiles map[string][]string

// line is line n of the file at path, "" when it cannot be read.
func (s sourceFiles) line(path string, n int) string {
	lines, ok := s[path]
	if !ok {
		if b, err := os.ReadFile(path); err == nil && len(b) < 64<<20 {
			lines = strings.Split(string(b), "\n")
		}
		s[path] = lines
	}
	if n < 1 || n > len(lines) {
		return ""
	}
	return strings.TrimSpace(lines[n-1])
}
