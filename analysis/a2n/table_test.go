package a2n

import (
	"cmp"
	"debug/elf"
	"math/rand/v2"
	"slices"
	"testing"
)

// mergedTable is how buildTable named addresses before the .eh_frame
// ranges were kept apart: every range merged into one sorted table (kept
// here as the reference the split table must agree with, address by
// address).
func mergedTable(raw []rawSym, plt, fdes []Sym) symtab {
	t, zeroName, labels := sizedSymbols(raw, len(plt))
	t = t.addUncovered(plt)
	if len(fdes) > 0 {
		for i := range fdes {
			fdes[i].Name = zeroName[fdes[i].Addr]
		}
		t = t.addUncovered(fdes)
	}
	if len(labels) > 0 {
		more := make([]Sym, 0, len(labels))
		for _, l := range labels {
			if t.covered(l.addr) {
				continue
			}
			end := l.secEnd
			i, _ := slices.BinarySearchFunc(t, l.addr, func(s Sym, a uint64) int { return cmp.Compare(s.Addr, a) })
			if i < len(t) && t[i].Addr < end {
				end = t[i].Addr
			}
			if end > l.addr {
				more = append(more, Sym{Addr: l.addr, Size: end - l.addr, Name: l.name})
			}
		}
		t = t.addUncovered(more)
	}
	return t
}

// checkSameOwners compares the split table with the merged reference at
// every address of [lo, hi) in steps of step.
func checkSameOwners(t *testing.T, what string, tb table, ref symtab, lo, hi, step uint64) {
	t.Helper()
	bad := 0
	for a := lo; a < hi; a += step {
		got, gok := tb.find(a)
		want, wok := ref.find(a)
		if gok != wok || got != want {
			bad++
			if bad <= 5 {
				t.Errorf("%s: address 0x%x: split table gives %+v (%v), merged table %+v (%v)", what, a, got, gok, want, wok)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d addresses named differently", what, bad)
	}
}

// The split table (symbols, and .eh_frame ranges apart) names every
// address as the merged table did, on random modules with overlapping
// symbols, aliases, zero-size labels, PLT stubs covered or not, and FDE
// ranges in runs with duplicates, zero sizes and covered starts.
func TestSplitTableMatchesMerged(t *testing.T) {
	rng := rand.New(rand.NewPCG(14, 2026))
	for iter := 0; iter < 400; iter++ {
		const lo, hi = 0x1000, 0x3000
		addr := func() uint64 { return lo + rng.Uint64N(hi-lo) }
		var raw []rawSym
		for i := rng.IntN(40); i > 0; i-- {
			s := rawSym{addr: addr(), secEnd: hi + uint64(rng.IntN(2))*0x100, name: string(rune('a'+rng.IntN(26))) + string(rune('a'+rng.IntN(26))), rank: rng.Uint32N(4)}
			switch rng.IntN(4) {
			case 0: // a zero-size label
				s.notype = true
			case 1: // a zero-size function
			default:
				s.size = 1 + rng.Uint64N(0x200)
				s.notype = rng.IntN(5) == 0
			}
			raw = append(raw, s)
		}
		var plt []Sym
		for i := rng.IntN(6); i > 0; i-- {
			plt = append(plt, Sym{Addr: addr() &^ 15, Size: 16, Name: "p@plt"})
		}
		var fdes []fdeRange
		for runs := rng.IntN(70); runs > 0; runs-- { // up to 70 runs: both sorts
			a := addr()
			for i := rng.IntN(8); i > 0 && a < hi; i-- {
				sz := rng.Uint64N(0x180)
				fdes = append(fdes, fdeRange{a, sz})
				if rng.IntN(6) == 0 {
					fdes = append(fdes, fdeRange{a, rng.Uint64N(0x100)}) // same start
				}
				a += sz + rng.Uint64N(0x40)
			}
		}
		refFDEs := make([]Sym, len(fdes))
		for i, f := range fdes {
			refFDEs[i] = Sym{Addr: f.start, Size: f.size}
		}
		ref := mergedTable(append([]rawSym(nil), raw...), append([]Sym(nil), plt...), refFDEs)
		tb := buildTable(raw, plt, append([]fdeRange(nil), fdes...))
		checkSameOwners(t, "random module", tb, ref, lo-0x10, hi+0x210, 1)
		if t.Failed() {
			t.Fatalf("iteration %d differs", iter)
		}
	}
}

// The same on real stripped modules of this machine (their .dynsym, PLT
// stubs and .eh_frame), every 4th byte of their code.
func TestSplitTableMatchesMergedOnRealModules(t *testing.T) {
	n := 0
	for _, path := range []string{"/usr/lib/x86_64-linux-gnu/liblzma.so.5", "/usr/lib/x86_64-linux-gnu/libstdc++.so.6", "/usr/lib/gcc/x86_64-linux-gnu/12/cc1"} {
		f, err := elf.Open(path)
		if err != nil {
			t.Logf("%s: %v", path, err)
			continue
		}
		raw, _ := elfSyms(f, true)
		plt := pltStubs(f)
		fdes := fdeRanges(f)
		if len(fdes) == 0 {
			f.Close()
			continue
		}
		refFDEs := make([]Sym, len(fdes))
		for i, r := range fdes {
			refFDEs[i] = Sym{Addr: r.start, Size: r.size}
		}
		ref := mergedTable(append([]rawSym(nil), raw...), append([]Sym(nil), plt...), refFDEs)
		tb := buildTable(raw, plt, fdes)
		for _, p := range f.Progs {
			if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 {
				checkSameOwners(t, path, tb, ref, p.Vaddr, p.Vaddr+p.Memsz, 4)
			}
		}
		f.Close()
		n++
	}
	if n == 0 {
		t.Skip("skipped: none of the stripped libraries this test reads is installed")
	}
}
