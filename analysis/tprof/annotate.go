package tprof

import (
	"bufio"
	"fmt"
	"io"

	"perfinsp/analysis/a2n"
	"perfinsp/analysis/annotate"
)

// WriteAnnotate writes the annotated disassembly of every function named
// fn that has ticks (perf annotate's view, package annotate): each of
// its instructions with the ticks at its address, each source line with
// its ticks. It needs a report built with addresses (BuildWithAddresses).
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
	list := make([]annotate.Function, 0, len(fns))
	for _, f := range fns {
		list = append(list, annotate.Function{Mod: f.mod, Sym: f.sym, At: f.at, Total: f.total})
	}
	annotate.Sort(list)
	w := bufio.NewWriter(out)
	aw := annotate.NewWriter(w, "Ticks", "ticks", rep.Total)
	for _, f := range list {
		if err := aw.Function(f); err != nil {
			return err
		}
	}
	return w.Flush()
}
