package main

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"golang.org/x/arch/x86/x86asm"

	"perfinsp/analysis/a2n"
)

// TestReadChainAtSegmentEnd: a block whose last instruction is the last
// of its load segment (the last function of a program's .text, .fini's
// ret) is read and spread over its instructions. A read of the usual
// length ran past the segment's end, and the shorter retries could stop
// short of the last instruction: the block's instructions then all went
// to its first one (a thread's final block in thr, the last function of
// a small program, came out in callgrind.out and annotate.out that way).
func TestReadChainAtSegmentEnd(t *testing.T) {
	needTool(t, "gcc")
	dir := t.TempDir()
	src := filepath.Join(dir, "p.c")
	if err := os.WriteFile(src, []byte("int main(void) { return 0; }\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	prog := filepath.Join(dir, "p")
	if out, err := exec.Command("gcc", "-O2", "-o", prog, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	f, err := elf.Open(prog)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// The executable segment's last section, read to its end: the block
	// from its first instruction to the segment's last.
	var seg *elf.Prog
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 {
			seg = p
		}
	}
	if seg == nil {
		t.Fatal("no executable load segment")
	}
	var last *elf.Section
	for _, s := range f.Sections {
		if s.Flags&elf.SHF_EXECINSTR != 0 && s.Addr+s.Size == seg.Vaddr+seg.Filesz {
			last = s
		}
	}
	if last == nil {
		t.Skipf("no executable section ends the segment (%#x): another linker's layout", seg.Vaddr+seg.Filesz)
	}
	code, err := last.Data()
	if err != nil {
		t.Fatal(err)
	}
	var offs []int64
	for off := 0; off < len(code); {
		inst, err := x86asm.Decode(code[off:], 64)
		if err != nil {
			t.Fatalf("%s at %#x: %v", last.Name, last.Addr+uint64(off), err)
		}
		offs = append(offs, int64(off))
		off += inst.Len
	}
	if len(offs) < 2 {
		t.Skipf("%s holds %d instruction(s)", last.Name, len(offs))
	}
	mod := a2n.New(nil).Cache.Module(prog)
	if mod == nil || mod.Err != nil {
		t.Fatalf("module: %v", mod)
	}
	k := span{mod: prog, start: last.Addr, last: offs[len(offs)-1]}
	c := &spanCount{runs: 3, insns: 3 * uint64(len(offs))}
	ch, ok := readChain(mod, k, c)
	if !ok {
		t.Fatalf("%s (%#x, last at +%#x, the segment's end %#x): not read", last.Name, k.start, k.last, seg.Vaddr+seg.Filesz)
	}
	if len(ch.addrs) != len(offs) {
		t.Fatalf("chain of %d instructions, want %d", len(ch.addrs), len(offs))
	}
	at := map[uint64]uint64{}
	if !ch.spread(c, func(a, n uint64) { at[a] += n }) {
		t.Fatal("not spread")
	}
	for _, off := range offs {
		if n := at[last.Addr+uint64(off)]; n != 3 {
			t.Errorf("%#x: %d, want 3", last.Addr+uint64(off), n)
		}
	}
	// Unknown last instruction (a thread's end): as far as the count goes.
	k.last = -1
	if ch, ok := readChain(mod, k, c); !ok || len(ch.addrs) != len(offs) {
		t.Fatalf("last unknown: ok %v, %d instructions, want %d", ok, len(ch.addrs), len(offs))
	}
}
