//go:build cgo

package insncheck

import (
	"debug/elf"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/arch/x86/x86asm"

	"perfinsp/internal/x86branch"
)

// corpus returns the .text of real binaries: the C library and libm (every
// SSE/AVX/AVX2/AVX-512 variant glibc carries) and this test binary.
func corpus(t *testing.T) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	self, _ := os.Executable()
	paths := []string{self}
	for _, g := range []string{"/usr/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libm.so.6", "/lib/x86_64-linux-gnu/libc.so.6"} {
		if m, _ := filepath.Glob(g); len(m) > 0 {
			paths = append(paths, m[0])
			break
		}
	}
	for _, p := range paths {
		f, err := elf.Open(p)
		if err != nil {
			t.Fatalf("open %s: %v", p, err)
		}
		s := f.Section(".text")
		if s == nil {
			f.Close()
			continue
		}
		b, err := s.Data()
		f.Close()
		if err != nil {
			t.Fatalf("%s .text: %v", p, err)
		}
		out[p] = b
	}
	if len(out) < 2 {
		t.Fatalf("want the test binary and libc, got %d files", len(out))
	}
	return out
}

// TestDecoderAgreesWithX86asm sweeps whole .text sections instruction by
// instruction with the module's decoder and checks every instruction
// x86asm decodes: the same length, the same kind (call, return, jump,
// iret, syscall, other, plain) and the same rep flag. One wrong length
// desynchronizes the sweep, so the counts of mismatches would explode.
// Encodings x86asm does not know (VEX/EVEX) must get a length from the
// module's decoder and be plain (never a branch).
func TestDecoderAgreesWithX86asm(t *testing.T) {
	for path, text := range corpus(t) {
		var n, vex, mism, undec int
		for off := 0; off < len(text); {
			code := text[off:min(off+16, len(text))]
			got := Decode(code)
			want := x86branch.Classify(code)
			n++
			if in, err := x86asm.Decode(code, 64); err == nil && (in.Op == x86asm.VZEROUPPER || in.Op == x86asm.VZEROALL) {
				// x86asm takes the byte after vzeroupper for a ModRM
				// (length 4 or 5); the instruction is C5 xx 77 or
				// C4 xx xx 77. Both say plain, so no tracer is misled.
				if vz := map[byte]int{0xc5: 3, 0xc4: 4}[code[0]]; got.Len != vz || got.Kind != int(x86branch.KindPlain) {
					mism++
					t.Errorf("%s+%#x % x: vzeroupper: module len %d kind %d", filepath.Base(path), off, code, got.Len, got.Kind)
				}
				off += max(got.Len, 1)
				continue
			}
			switch {
			case want.Kind == x86branch.KindUndecodable && got.Len > 0:
				vex++
				if got.Kind != int(x86branch.KindPlain) {
					mism++
					if mism < 10 {
						t.Errorf("%s+%#x % x: x86asm cannot decode, module says kind %d", filepath.Base(path), off, code, got.Kind)
					}
				}
			case want.Kind == x86branch.KindUndecodable:
				undec++
			case got.Len != int(want.Len) || got.Kind != int(want.Kind) || got.Rep != want.Rep:
				mism++
				if mism < 10 {
					in, _ := x86asm.Decode(code, 64)
					t.Errorf("%s+%#x % x (%v): module len %d kind %d rep %v, x86asm len %d kind %d rep %v",
						filepath.Base(path), off, code, in, got.Len, got.Kind, got.Rep, want.Len, want.Kind, want.Rep)
				}
			}
			step := got.Len
			if step == 0 {
				step = int(want.Len)
			}
			if step == 0 {
				step = 1
			}
			off += step
		}
		t.Logf("%s: %d instructions, %d only the module decodes (VEX/EVEX), %d neither, %d mismatches", filepath.Base(path), n, vex, undec, mism)
		if mism > 0 {
			t.Errorf("%s: %d mismatches", filepath.Base(path), mism)
		}
		if n < 10000 {
			t.Errorf("%s: only %d instructions swept", path, n)
		}
	}
}

// TestDecoderCases pins the cases the single-step handler depends on.
func TestDecoderCases(t *testing.T) {
	cases := []struct {
		code []byte
		want Insn
	}{
		{[]byte{0x0f, 0x05}, Insn{2, int(x86branch.KindSyscall), false}},                        // syscall
		{[]byte{0xcd, 0x80}, Insn{2, int(x86branch.KindSyscall), false}},                        // int 0x80
		{[]byte{0xf3, 0xa4}, Insn{2, int(x86branch.KindPlain), true}},                           // rep movsb
		{[]byte{0xf3, 0x48, 0xab}, Insn{3, int(x86branch.KindPlain), true}},                     // rep stosq
		{[]byte{0xf3, 0x0f, 0x1e, 0xfa}, Insn{4, int(x86branch.KindPlain), false}},              // endbr64
		{[]byte{0xe8, 1, 2, 3, 4}, Insn{5, int(x86branch.KindCall), false}},                     // call rel32
		{[]byte{0xff, 0x15, 1, 2, 3, 4}, Insn{6, int(x86branch.KindCall), false}},               // call *rip+
		{[]byte{0xff, 0xe0}, Insn{2, int(x86branch.KindJump), false}},                           // jmp *rax
		{[]byte{0xc3}, Insn{1, int(x86branch.KindReturn), false}},                               // ret
		{[]byte{0x48, 0xcf}, Insn{2, int(x86branch.KindIret), false}},                           // iretq
		{[]byte{0x0f, 0x84, 1, 2, 3, 4}, Insn{6, int(x86branch.KindJump), false}},               // je rel32
		{[]byte{0x48, 0xb8, 1, 2, 3, 4, 5, 6, 7, 8}, Insn{10, int(x86branch.KindPlain), false}}, // movabs
		{[]byte{0xc5, 0xf8, 0x77}, Insn{3, int(x86branch.KindPlain), false}},                    // vzeroupper
		{[]byte{0xc4, 0xe2, 0x7d, 0x58, 0x04, 0x24}, Insn{6, int(x86branch.KindPlain), false}},  // vpbroadcastd
		{[]byte{0x62, 0xf1, 0xfe, 0x48, 0x6f, 0x06}, Insn{6, int(x86branch.KindPlain), false}},  // vmovdqu64 zmm
		{[]byte{0x06}, Insn{0, int(x86branch.KindUndecodable), false}},                          // push es: invalid
		{[]byte{0xe8, 1, 2}, Insn{0, int(x86branch.KindUndecodable), false}},                    // truncated
	}
	for _, c := range cases {
		if got := Decode(c.code); got != c.want {
			t.Errorf("% x: got %+v, want %+v", c.code, got, c.want)
		}
	}
}
