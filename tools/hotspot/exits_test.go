package main

import (
	"errors"
	"testing"
)

// TestExitsOf: the exits of hand-assembled functions: return instructions
// and jumps out are probed, jumps inside are not exits, indirect jumps and
// conditional jumps out are counted as not probed; endbr64 and VEX
// encodings are stepped over; an unknown byte stops the decoding.
func TestExitsOf(t *testing.T) {
	code := []byte{
		0xf3, 0x0f, 0x1e, 0xfa, // 0: endbr64
		0x55,             // 4: push %rbp
		0xc5, 0xf8, 0x77, // 5: vzeroupper
		0xc5, 0xfd, 0x6f, 0x04, 0x24, // 8: vmovdqa (%rsp),%ymm0
		0xc4, 0xe3, 0x7d, 0x18, 0xc1, 0x01, // 13: vinsertf128 $1,%xmm1,%ymm0,%ymm0 (imm8)
		0x74, 0x02, // 19: je 23 (inside)
		0x75, 0x40, // 21: jne out (a conditional tail jump)
		0xff, 0xe0, // 23: jmp *%rax
		0x5d,                         // 25: pop %rbp
		0xc3,                         // 26: ret
		0xe9, 0x00, 0x10, 0x00, 0x00, // 27: jmp out (a tail jump)
		0xeb, 0xde, // 32: jmp 0 (inside)
		0xcc, // 34: int3 padding
	}
	p := exitsOf(code, 0x1000)
	if p.Why != "" || len(p.Offs) != 2 || p.Offs[0] != 0x1000+26 || p.Offs[1] != 0x1000+27 || p.Unprobed != 2 {
		t.Fatalf("exits %+v: want the ret at +26 and the tail jump at +27, 2 not probed (jne out, jmp *%%rax)", p)
	}
	if p := exitsOf([]byte{0x55, 0x0f, 0x0b, 0x5d}, 0); p.Why == "" || len(p.Offs) != 0 {
		t.Fatalf("exits %+v: want none found (ud2, no ret) and why", p)
	}
	if p := exitsOf([]byte{0x55, 0xc4}, 0); p.Why == "" {
		t.Fatalf("exits %+v: want a truncated VEX prefix refused", p)
	}
}

// TestCallStacksPairing: entries and exits pair by stack pointer; calls
// left by longjmp are dropped (counted in NoExit), never paired with a
// later exit; an exit with no entry is not paired.
func TestCallStacksPairing(t *testing.T) {
	f, g, h := &FuncStat{}, &FuncStat{}, &FuncStat{}
	cs := callStacks{}
	k := stackKey{id: 1}
	cs.enter(k, frame{fs: f, t: 10, sp: 1000})
	cs.enter(k, frame{fs: g, t: 20, sp: 900}) // f calls g
	cs.enter(k, frame{fs: h, t: 30, sp: 800}) // g calls h, which longjmps back into f
	if fr, ok := cs.exit(k, f, 1000); !ok || fr.t != 10 {
		t.Fatalf("f's exit: %+v %v, want paired with its entry at t 10", fr, ok)
	}
	if g.NoExit != 1 || h.NoExit != 1 || len(cs[k]) != 0 {
		t.Fatalf("g, h left unseen %d, %d, stack %v: want both dropped", g.NoExit, h.NoExit, cs[k])
	}
	if _, ok := cs.exit(k, g, 900); ok {
		t.Fatal("an exit with no entry was paired")
	}
	// A new entry at the same stack pointer: the earlier call has ended.
	cs.enter(k, frame{fs: f, t: 40, sp: 1000})
	cs.enter(k, frame{fs: f, t: 50, sp: 1000})
	if f.NoExit != 1 || len(cs[k]) != 1 {
		t.Fatalf("f left unseen %d, stack %v: want the first call dropped", f.NoExit, cs[k])
	}
	// Another thread's stack is paired apart.
	k2 := stackKey{id: 2}
	cs.enter(k2, frame{fs: g, t: 60, sp: 500})
	if fr, ok := cs.exit(k2, g, 500); !ok || fr.t != 60 || len(cs[k]) != 1 {
		t.Fatalf("other thread's exit %+v %v, first thread's stack %v", fr, ok, cs[k])
	}
}

// TestDropExit: an exit the kernel refuses is no longer probed; with none
// left the calls are not timed, and say why, and cost their entry only.
func TestDropExit(t *testing.T) {
	fs := &FuncStat{exits: []uint64{10, 20}, ExitProbes: 2, costNs: 40, entryNs: 20}
	fs.dropExit(0, errors.New("EINVAL"))
	if len(fs.exits) != 1 || fs.exits[0] != 20 || fs.ExitProbes != 1 || fs.ExitsUnprobed != 1 || fs.ExitsNote != "" || fs.costNs != 40 {
		t.Fatalf("after one drop: %+v", fs)
	}
	fs.dropExit(0, errors.New("EINVAL"))
	if len(fs.exits) != 0 || fs.ExitProbes != 0 || fs.ExitsUnprobed != 2 || fs.ExitsNote == "" || fs.costNs != 20 {
		t.Fatalf("after both: %+v", fs)
	}
}
