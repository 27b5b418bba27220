package a2n

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"perfinsp/internal/testenv"
)

// A zero-size FUNC symbol inside an .eh_frame range no sized symbol holds
// names that range, as glibc's signal trampoline __restore_rt (no size;
// its FDE starts at the nop before it, so that pc-1 of a handler's return
// address finds it): a handler's caller frame is __restore_rt, not
// libc.so.6+0x3c04f. A zero-size symbol inside a sized function does not
// take the function's addresses.
func TestZeroSizeFuncNamedByItsFDE(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "tramp.c")
	if err := os.WriteFile(src, []byte(`
asm(".text\n"
    ".globl zs_tramp\n.type zs_tramp,@function\n"
    ".cfi_startproc\n"
    "nop\n"
    "zs_tramp:\n"
    "mov $15, %rax\n"
    "syscall\n"
    ".cfi_endproc\n");
__attribute__((noinline)) int sized_fn(int x) {
	asm volatile(".globl zs_inner\n.type zs_inner,@function\nzs_inner:\n");
	return x * 3 + 1;
}
int main(int argc, char **argv) { return sized_fn(argc); }
`), 0o644); err != nil {
		t.Fatal(err)
	}
	prog := filepath.Join(dir, "tramp")
	if out, err := exec.Command("gcc", "-O1", "-o", prog, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	f, all := testenv.ELF(t, prog)
	f.Close()
	syms := map[string]elf.Symbol{}
	for _, s := range all {
		syms[s.Name] = s
	}
	tramp, inner, fn := syms["zs_tramp"], syms["zs_inner"], syms["sized_fn"]
	if tramp.Value == 0 || tramp.Size != 0 || inner.Value == 0 || fn.Size == 0 {
		t.Fatalf("symbols: zs_tramp %+v, zs_inner %+v, sized_fn %+v", tramp, inner, fn)
	}
	m := (&Cache{}).Module(prog)
	for _, va := range []uint64{tramp.Value - 1, tramp.Value, tramp.Value + 7} {
		if s, ok := m.SymbolAt(va); !ok || s.Name != "zs_tramp" {
			t.Fatalf("%#x (zs_tramp%+d) named %q (ok %v)", va, int64(va)-int64(tramp.Value), s.Name, ok)
		}
	}
	for va := fn.Value; va < fn.Value+fn.Size; va++ {
		if s, ok := m.SymbolAt(va); !ok || s.Name != "sized_fn" {
			t.Fatalf("%#x (sized_fn+%#x) named %q (ok %v)", va, va-fn.Value, s.Name, ok)
		}
	}
}
