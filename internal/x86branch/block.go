package x86branch

import "golang.org/x/arch/x86/x86asm"

// Block-stepping (PTRACE_SINGLEBLOCK, the CPU's BTF) traps only after a taken
// branch. From a block's first address (the previous stop's ip) and the new
// stop's ip, the block decoder recovers what single-stepping would have
// seen: how many instructions ran, which one was the branch and its kind.
// A block is the fall-through chain from its start: instructions in
// address order up to the first unconditional transfer (jmp, call, ret,
// iret, any indirect one); a conditional jump inside it ends the block only
// if the new ip is its target (not taken, the block goes on).

// CodeReader reads the traced process's code at addr into buf and returns
// how many bytes it could read (fewer where the next page is not mapped).
type CodeReader func(addr uint64, buf []byte) int

// BranchInsn is one decoded instruction of a block, with its address and,
// for a direct branch, its target.
type BranchInsn struct {
	Insn
	Addr   uint64
	Cond   bool   // a conditional jump (jcc, loop, jrcxz): taken or not
	Target uint64 // a direct branch's target; 0 for an indirect one and for non-branches
	Pop    uint16 // ret imm16: the bytes it pops besides the return address
	// Emulated: cpuid, which a hypervisor emulates and whose single-step
	// trap it may lose (see Overran).
	Emulated bool
	// For Next's evaluation of a branch (run.go): the operation, an
	// indirect branch's operand and the address size.
	Op       x86asm.Op
	Arg      x86asm.Arg
	AddrSize uint8
}

// Next is the instruction's fall-through address.
func (b BranchInsn) Next() uint64 { return b.Addr + uint64(b.Len) }

// Transfers reports whether the instruction always moves control (so it
// always ends a block): call, ret, iret, an unconditional jump.
func (b BranchInsn) Transfers() bool {
	switch b.Kind {
	case KindCall, KindReturn, KindIret:
		return true
	case KindJump:
		return !b.Cond
	}
	return false
}

// MaxBlock bounds a block's pre-decode: a longer fall-through chain is
// single-stepped.
const MaxBlock = 512

// Block is the pre-decoded fall-through chain from Start.
type Block struct {
	Start uint64
	// Insns: the chain, up to and including the first unconditional
	// transfer, or up to the first instruction block mode cannot count.
	Insns []BranchInsn
	// Steppable: block-stepping from Start yields exact counts. If not,
	// Why says what (a rep string instruction, a system call, ...) and
	// the tracer single-steps.
	Steppable bool
	Why       string
	// Probe: no branch of the chain can end at the first instruction's
	// fall-through, so a stop there after a block step means the CPU
	// ignored BTF (it stepped one instruction). Only these blocks are
	// block-stepped until that is known.
	Probe bool
}

// Decoder decodes the code of one address space into instructions and
// blocks and caches both (blocks repeat millions of times). Self-modifying
// code is decoded as first seen: a tracer drops the Decoder at exec.
type Decoder struct {
	insns  map[uint64]BranchInsn
	blocks map[uint64]*Block
	runs   map[uint64]*Run
	buf    [16]byte
}

// NewDecoder returns an empty decoder.
func NewDecoder() *Decoder {
	return &Decoder{insns: map[uint64]BranchInsn{}, blocks: map[uint64]*Block{}, runs: map[uint64]*Run{}}
}

// Insn returns the instruction at addr.
func (d *Decoder) Insn(read CodeReader, addr uint64) BranchInsn {
	if in, ok := d.insns[addr]; ok {
		return in
	}
	n := read(addr, d.buf[:])
	if n < 0 {
		n = 0
	}
	in, inst := decode(d.buf[:n])
	b := BranchInsn{Insn: in, Addr: addr}
	if in.Kind == KindJump || in.Kind == KindCall {
		if rel, ok := inst.Args[0].(x86asm.Rel); ok {
			b.Target = b.Next() + uint64(int64(rel))
		}
		switch inst.Op {
		case x86asm.JMP, x86asm.LJMP, x86asm.CALL, x86asm.LCALL:
		default:
			b.Cond = in.Kind == KindJump
		}
	}
	b.Emulated = inst.Op == x86asm.CPUID
	b.AddrSize = uint8(inst.AddrSize)
	if in.Kind != KindPlain {
		b.Op = inst.Op
		if b.Target == 0 && (in.Kind == KindJump || in.Kind == KindCall) {
			b.Arg = inst.Args[0]
		}
	} else if inst.Op == x86asm.POPF || inst.Op == x86asm.POPFD || inst.Op == x86asm.POPFQ {
		b.Op = inst.Op
	}
	if inst.Op == x86asm.RET {
		if imm, ok := inst.Args[0].(x86asm.Imm); ok {
			b.Pop = uint16(imm)
		}
	}
	d.insns[addr] = b
	return b
}

// unsteppable says why block mode cannot count the instruction exactly,
// or "".
func unsteppable(b BranchInsn, inst func() x86asm.Op) string {
	switch {
	case b.Kind == KindUndecodable:
		return "an instruction x86asm cannot decode"
	case b.Rep:
		return "a rep string instruction (counted per iteration)"
	case b.Kind == KindSyscall:
		return "a system call"
	case b.Kind == KindOther:
		return "an instruction that traps (int, ud2, hlt)"
	case b.Cond && b.Target == 0:
		return "a conditional jump without a direct target"
	case b.Cond && b.Target == b.Next():
		return "a conditional jump to its own fall-through (taken or not looks the same)"
	}
	switch inst() {
	case x86asm.XBEGIN:
		return "a transaction start"
	case x86asm.POPF, x86asm.POPFD, x86asm.POPFQ:
		return "popf (may change the trap flag)"
	}
	return ""
}

// Block returns the pre-decoded block from start.
func (d *Decoder) Block(read CodeReader, start uint64) *Block {
	if b, ok := d.blocks[start]; ok {
		return b
	}
	b := &Block{Start: start}
	pc := start
	for {
		in := d.Insn(read, pc)
		b.Insns = append(b.Insns, in)
		if why := unsteppable(in, func() x86asm.Op { return d.op(read, in) }); why != "" {
			b.Why = why
			break
		}
		if in.Transfers() {
			b.Steppable = true
			break
		}
		if len(b.Insns) == MaxBlock {
			b.Why = "a fall-through chain longer than MaxBlock instructions"
			break
		}
		pc = in.Next()
	}
	if b.Steppable {
		b.check()
	}
	b.Insns = append([]BranchInsn(nil), b.Insns...) // no spare capacity kept
	d.blocks[start] = b
	return b
}

// op decodes the operation of a plain instruction (only to spot popf and
// xbegin; rare enough not to be cached).
func (d *Decoder) op(read CodeReader, in BranchInsn) x86asm.Op {
	if in.Kind != KindPlain && in.Kind != KindJump {
		return 0
	}
	n := read(in.Addr, d.buf[:])
	if n < 0 {
		n = 0
	}
	_, inst := decode(d.buf[:n])
	return inst.Op
}

// check marks a block whose end could not be told from the stop's ip
// alone: two branches with the same direct target (which one was taken?).
// It also decides Probe.
func (b *Block) check() {
	seen := map[uint64]bool{}
	first := b.Insns[0]
	b.Probe = !first.Transfers()
	if last := b.Insns[len(b.Insns)-1]; last.Kind == KindJump && last.Target == 0 && len(b.Insns) > 1 {
		for _, in := range b.Insns {
			if in.Cond {
				// A switch: its jump table sends cases to the
				// default label the bounds check's jcc goes to.
				b.Steppable, b.Why = false, "a conditional jump and an indirect jump (a switch: the stop cannot tell which went there)"
				b.Probe = false
				return
			}
		}
	}
	for _, in := range b.Insns {
		if !in.Cond && !in.Transfers() {
			continue
		}
		if in.Target == 0 {
			b.Probe = false // an indirect transfer may go anywhere
			continue
		}
		if seen[in.Target] {
			b.Steppable, b.Why = false, "two branches to the same target (the stop cannot tell which was taken)"
			b.Probe = false
			return
		}
		seen[in.Target] = true
		if in.Target == first.Next() {
			b.Probe = false
		}
	}
}

// How a block step ended.
type How uint8

// Ends of a block step.
const (
	// Taken: a branch of the block went to the stop's ip.
	Taken How = iota
	// FellThrough: the stop is at the first instruction's fall-through
	// and no branch of the block goes there: one instruction ran, no
	// branch (the CPU ignored BTF and single-stepped).
	FellThrough
	// NoMatch: no way through the block reaches the stop.
	NoMatch
)

// BlockEnd is what a block step from a block's start to a stop ran.
type BlockEnd struct {
	How  How
	N    uint32 // instructions run, the last one included
	Last uint64 // the last instruction's address
	Kind Kind   // the last instruction's kind (Taken: the branch)
	// Ambiguous: more than one branch could have gone to the stop
	// (a conditional jump there, and a ret or indirect call at the end:
	// see Final and the tracer's stack check); the first is taken.
	Ambiguous bool
	// NoBranch: the last instruction jumped to its own fall-through.
	// The CPU traps there, but single-stepping sees no branch (the block
	// goes on), and records must not depend on the stepping.
	NoBranch bool
}

// End decodes a block step from b.Start that stopped at stop, as the
// trap after a taken branch.
func (b *Block) End(stop uint64) BlockEnd {
	var end BlockEnd
	found := false
	for i, in := range b.Insns {
		last := i == len(b.Insns)-1
		hit := (in.Cond && in.Target == stop) || (last && in.Transfers() && (in.Target == 0 || in.Target == stop))
		if !hit {
			continue
		}
		if found {
			end.Ambiguous = true
			break
		}
		found = true
		end = BlockEnd{How: Taken, N: uint32(i + 1), Last: in.Addr, Kind: in.Kind}
	}
	if found {
		if in := b.Insns[end.N-1]; in.Kind == KindJump && !in.Cond && stop == in.Next() {
			end.NoBranch = true
		}
		return end
	}
	if first := b.Insns[0]; !first.Transfers() && stop == first.Next() {
		return BlockEnd{How: FellThrough, N: 1, Last: first.Addr, Kind: first.Kind}
	}
	return BlockEnd{How: NoMatch}
}

// Final is the block's end by its last instruction, a transfer (what an
// Ambiguous end's other explanation is).
func (b *Block) Final() (BranchInsn, BlockEnd) {
	in := b.Insns[len(b.Insns)-1]
	return in, BlockEnd{How: Taken, N: uint32(len(b.Insns)), Last: in.Addr, Kind: in.Kind}
}

// FallThrough counts the instructions run from b.Start to stop when the
// block step was stopped by something other than its branch (a signal,
// an interrupt of the tracer): every one fell through, so stop is an
// address of the chain. ok is false if it is not.
func (b *Block) FallThrough(stop uint64) (n uint32, last uint64, ok bool) {
	for i, in := range b.Insns {
		if in.Addr == stop {
			if i == 0 {
				return 0, 0, true
			}
			return uint32(i), b.Insns[i-1].Addr, true
		}
		if in.Transfers() {
			break
		}
	}
	return 0, 0, false
}

// Overran explains a single step from the non-branch instruction at from
// that stopped at to, not at its fall-through: the trap after it was lost
// (a hypervisor emulating cpuid can drop it) and
// the following instructions ran too, up to the next trap. The block
// decoder tells how many: a stop on the fall-through chain (How
// FellThrough, N instructions, Last the last one) or after its branch
// (How Taken). ok is false if nothing on the chain explains the stop.
func (d *Decoder) Overran(read CodeReader, from, to uint64) (BlockEnd, bool) {
	b := d.Block(read, from)
	if to == b.Insns[0].Next() {
		return BlockEnd{}, false // one instruction ran: nothing was lost
	}
	if n, last, ok := b.FallThrough(to); ok && n >= 2 {
		return BlockEnd{How: FellThrough, N: n, Last: last, Kind: KindPlain}, true
	}
	if end := b.End(to); end.How == Taken && end.N >= 2 {
		return end, true
	}
	return BlockEnd{}, false
}
