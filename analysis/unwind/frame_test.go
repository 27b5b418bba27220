package unwind

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// FrameFromRBP on a -O2 -fno-omit-frame-pointer build: a true leaf never
// has its CFA from RBP; a function with a frame has it from RBP once
// "mov %rsp,%rbp" has run, not at its entry.
func TestFrameFromRBP(t *testing.T) {
	needGCC(t)
	dir := t.TempDir()
	src, exe := filepath.Join(dir, "f.c"), filepath.Join(dir, "f")
	if err := os.WriteFile(src, []byte(`__attribute__((noipa)) long leaf(long x) { long s = 0; for (long i = 0; i < x; i++) s += i ^ (s >> 1); return s; }
__attribute__((noipa)) long mid(long n) { long r = leaf(n); return r * 3 + 1; }
int main(int argc, char **argv) { return (int)mid(argc); }
`), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-O2", "-fno-omit-frame-pointer", "-o", exe, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	f, err := os.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	tb, err := Load(f, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	ef, err := elf.NewFile(f)
	if err != nil {
		t.Fatal(err)
	}
	syms, _ := ef.Symbols()
	off := func(name string) (uint64, []byte) {
		for _, s := range syms {
			if s.Name == name {
				for _, p := range ef.Progs {
					if p.Type == elf.PT_LOAD && s.Value >= p.Vaddr && s.Value < p.Vaddr+p.Filesz {
						code := make([]byte, s.Size)
						f.ReadAt(code, int64(s.Value-p.Vaddr+p.Off))
						return s.Value - p.Vaddr + p.Off, code
					}
				}
			}
		}
		t.Fatalf("no symbol %s", name)
		return 0, nil
	}
	leaf, code := off("leaf")
	for i := range code {
		if fromRBP, ok := tb.FrameFromRBP(leaf + uint64(i)); !ok || fromRBP {
			t.Fatalf("leaf+%d: CFA from RBP %v (ok %v): a true leaf's never is", i, fromRBP, ok)
		}
	}
	mid, code := off("mid")
	if fromRBP, ok := tb.FrameFromRBP(mid); !ok || fromRBP {
		t.Fatalf("mid's entry: CFA from RBP %v (ok %v), want false", fromRBP, ok)
	}
	// push %rbp (55); mov %rsp,%rbp (48 89 e5), perhaps after endbr64
	for i := 0; i+4 <= len(code); i++ {
		if code[i] == 0x55 && code[i+1] == 0x48 && code[i+2] == 0x89 && code[i+3] == 0xe5 {
			if fromRBP, ok := tb.FrameFromRBP(mid + uint64(i) + 4); !ok || !fromRBP {
				t.Fatalf("mid after mov %%rsp,%%rbp: CFA from RBP %v (ok %v), want true", fromRBP, ok)
			}
			return
		}
	}
	t.Fatalf("gcc built mid without push %%rbp; mov %%rsp,%%rbp: % x", code)
}
