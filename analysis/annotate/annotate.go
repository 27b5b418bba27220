// Package annotate writes perf annotate's view of a function: its
// instructions, disassembled from the module's file (x86-64, AT&T syntax
// as objdump prints it), each with its count (tprof's ticks, ITrace's
// exact instruction counts) and share of the function's, and above each
// run of instructions of one source line that line's text and its count,
// from the module's DWARF and the source file when it is readable.
package annotate

import (
	"bufio"
	"fmt"
	"os"
	"sort"
	"strings"

	"golang.org/x/arch/x86/x86asm"

	"perfinsp/analysis/a2n"
)

// Function is one function's counts: by virtual address of the module
// (what its ELF file gives the instructions), Total their sum.
type Function struct {
	Mod   *a2n.Module
	Sym   a2n.Sym
	At    map[uint64]uint64
	Total uint64
}

// Sort orders fns as they are written: the largest count first, then by
// module path.
func Sort(fns []Function) {
	sort.Slice(fns, func(i, j int) bool {
		if fns[i].Total != fns[j].Total {
			return fns[i].Total > fns[j].Total
		}
		return fns[i].Mod.Path < fns[j].Mod.Path
	})
}

// Writer writes annotated functions to w. Unit names the counts in the
// column heading ("Ticks"), Noun in the function's heading ("ticks"); All
// is the whole profile's count (the function's share of it is shown).
type Writer struct {
	w    *bufio.Writer
	Unit string
	Noun string
	All  uint64
	src  sourceFiles
}

// NewWriter returns a Writer to w.
func NewWriter(w *bufio.Writer, unit, noun string, all uint64) *Writer {
	return &Writer{w: w, Unit: unit, Noun: noun, All: all, src: sourceFiles{}}
}

// lineKey is a source line.
type lineKey struct {
	file string
	line int
}

// Function writes f's annotated disassembly: its symbol's code (a symbol
// without a size: up to the last address with a count).
func (aw *Writer) Function(f Function) error {
	w, mod, sym := aw.w, f.Mod, f.Sym
	size := sym.Size
	for va := range f.At {
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
	lines := map[lineKey]uint64{}
	for va, n := range f.At {
		if file, line, ok := mod.Line(va); ok {
			lines[lineKey{file, line}] += n
		}
	}
	fmt.Fprintf(w, "Percent | %-8s Address   %s  (%s, %d %s, %.2f%% of all)\n", aw.Unit, sym.Name, mod.Path, f.Total, aw.Noun, pct(f.Total, aw.All))
	fmt.Fprintln(w, "--------+-------------------------------------------------------------------")
	last := lineKey{line: -1}
	for off := uint64(0); off < uint64(len(code)); {
		va := sym.Addr + off
		if file, line, ok := mod.Line(va); ok && (lineKey{file, line}) != last {
			last = lineKey{file, line}
			fmt.Fprintf(w, "        :          %s:%d  %s", shortFile(file), line, aw.src.line(file, line))
			if n := lines[last]; n > 0 {
				fmt.Fprintf(w, "   [line: %d, %.2f%%]", n, pct(n, f.Total))
			}
			fmt.Fprintln(w)
		}
		inst, err := x86asm.Decode(code[off:], 64)
		text, n := "", inst.Len
		if err != nil || n == 0 {
			text, n = fmt.Sprintf("(bad) %02x", code[off]), 1
		} else {
			text = x86asm.GNUSyntax(inst, va, nil)
		}
		if t := f.At[va]; t > 0 {
			fmt.Fprintf(w, "%7.2f : %8d  %8x:  %s\n", pct(t, f.Total), t, va, text)
		} else {
			fmt.Fprintf(w, "        :           %8x:  %s\n", va, text)
		}
		off += uint64(n)
	}
	fmt.Fprintln(w)
	return nil
}

func pct(n, of uint64) float64 {
	if of == 0 {
		return 0
	}
	return 100 * float64(n) / float64(of)
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
