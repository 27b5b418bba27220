package x86branch

import "testing"

func TestClassify(t *testing.T) {
	for _, c := range []struct {
		name string
		code []byte
		want Insn
	}{
		{"call rel32", []byte{0xe8, 1, 2, 3, 4}, Insn{Len: 5, Kind: KindCall}},
		{"call *%rax", []byte{0xff, 0xd0}, Insn{Len: 2, Kind: KindCall}},
		{"ret", []byte{0xc3}, Insn{Len: 1, Kind: KindReturn}},
		{"repz ret", []byte{0xf3, 0xc3}, Insn{Len: 2, Kind: KindReturn}},
		{"jmp rel8", []byte{0xeb, 0xfe}, Insn{Len: 2, Kind: KindJump}},
		{"jne rel8", []byte{0x75, 0x10}, Insn{Len: 2, Kind: KindJump}},
		{"bnd jmp *%r11 (PLT)", []byte{0xf2, 0x41, 0xff, 0xe3}, Insn{Len: 4, Kind: KindJump}},
		{"syscall", []byte{0x0f, 0x05}, Insn{Len: 2, Kind: KindSyscall}},
		{"int $0x80", []byte{0xcd, 0x80}, Insn{Len: 2, Kind: KindSyscall}},
		{"rep movsb", []byte{0xf3, 0xa4}, Insn{Len: 2, Rep: true}},
		{"rep stosq", []byte{0xf3, 0x48, 0xab}, Insn{Len: 3, Rep: true}},
		{"movsb (no rep)", []byte{0xa4}, Insn{Len: 1}},
		{"endbr64", []byte{0xf3, 0x0f, 0x1e, 0xfa}, Insn{Len: 4}},
		// x86asm decodes their F3 (66) prefix alone, as a 1-byte Op 0
		{"rdsspq (CET)", []byte{0xf3, 0x48, 0x0f, 0x1e, 0xc8, 0xc3}, Insn{Kind: KindUndecodable}},
		{"incsspd (CET)", []byte{0xf3, 0x0f, 0xae, 0xe9, 0xc3}, Insn{Kind: KindUndecodable}},
		{"saveprevssp (CET)", []byte{0xf3, 0x0f, 0x01, 0xea, 0xc3}, Insn{Kind: KindUndecodable}},
		{"wrussq (CET)", []byte{0x66, 0x48, 0x0f, 0x38, 0xf5, 0x07, 0xc3}, Insn{Kind: KindUndecodable}},
		{"add %rdi,%rax", []byte{0x48, 0x01, 0xf8}, Insn{Len: 3}},
		{"ud2", []byte{0x0f, 0x0b}, Insn{Len: 2, Kind: KindOther}},
		{"vzeroupper (then ret)", []byte{0xc5, 0xf8, 0x77, 0xc3}, Insn{Len: 3}},
		{"vzeroupper, 3-byte VEX", []byte{0xc4, 0xe1, 0x78, 0x77, 0xc3}, Insn{Len: 4}},
		{"empty", nil, Insn{Kind: KindUndecodable}},
	} {
		if got := Classify(c.code); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
	// VEX (AVX2) encodings never branch: undecodable or plain, never a branch kind.
	if k := Classify([]byte{0xc5, 0xfd, 0x74, 0x0f}).Kind; k != KindUndecodable && k != KindPlain {
		t.Errorf("vpcmpeqb: kind %d", k)
	}
}
