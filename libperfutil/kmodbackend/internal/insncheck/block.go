//go:build cgo

package insncheck

/*
#cgo CFLAGS: -I${SRCDIR}/../../../../kmod -Wall -Werror
#include <stdlib.h>
#include <string.h>
#include "pitrace_block.c"

// One mapped range of a simulated user address space.
struct mem {
	unsigned long long base;
	const unsigned char *b;
	unsigned long long n;
};

static int mem_read(void *ctx, unsigned long long addr, unsigned char *buf,
		    unsigned int n)
{
	struct mem *m = ctx;

	if (addr < m->base || addr + n > m->base + m->n)
		return -1;
	memcpy(buf, m->b + (addr - m->base), n);
	return 0;
}

static void scan(struct mem *m, unsigned long long start, struct pt_scan *out)
{
	pt_block_scan(mem_read, m, start, out);
}

static int walk(struct mem *m, unsigned long long start,
		unsigned long long target, long long dsp, int dspk,
		struct pt_block *out)
{
	return pt_block_walk(mem_read, m, start, target, dsp, dspk, out);
}

static int walk_to(struct mem *m, unsigned long long start,
		   unsigned long long ip, struct pt_block *out)
{
	return pt_block_walk_to(mem_read, m, start, ip, out);
}
*/
import "C"

import "unsafe"

// BlockMax is the longest line the decoder walks (PT_BLOCK_MAX).
const BlockMax = int(C.PT_BLOCK_MAX)

// Mem is a simulated user address space: Code mapped at Base, nothing else.
type Mem struct {
	Base uint64
	Code []byte
}

// Scan is pt_block_scan's answer.
type Scan struct {
	Steppable, Probe, NeedsSP bool
	Len                       int
	FirstNext                 uint64
}

// Block is pt_block_walk's answer.
type Block struct {
	Count int
	Last  uint64
	Kind  int
}

// with runs f on a C copy of m (the C code keeps no pointer).
func (m Mem) with(f func(*C.struct_mem)) {
	p := C.CBytes(append([]byte{0}, m.Code...))
	defer C.free(p)
	cm := C.struct_mem{base: C.ulonglong(m.Base), b: (*C.uchar)(unsafe.Add(p, 1)), n: C.ulonglong(len(m.Code))}
	f(&cm)
}

// Scan runs pt_block_scan on the block at start.
func (m Mem) Scan(start uint64) Scan {
	var out C.struct_pt_scan
	m.with(func(cm *C.struct_mem) { C.scan(cm, C.ulonglong(start), &out) })
	return Scan{Steppable: out.flags&C.PT_BLOCK_STEPPABLE != 0, Probe: out.flags&C.PT_BLOCK_PROBE != 0,
		NeedsSP: out.flags&C.PT_BLOCK_NEEDS_SP != 0, Len: int(out.len), FirstNext: uint64(out.first_next)}
}

// Walk runs pt_block_walk: the block at start that branched to target,
// the stack pointer not known.
func (m Mem) Walk(start, target uint64) (Block, bool) {
	return m.walk(start, target, 0, false)
}

// WalkSP runs pt_block_walk with the stack pointer dsp bytes from the start's.
func (m Mem) WalkSP(start, target uint64, dsp int64) (Block, bool) {
	return m.walk(start, target, dsp, true)
}

func (m Mem) walk(start, target uint64, dsp int64, dspk bool) (Block, bool) {
	var out C.struct_pt_block
	var r C.int
	k := C.int(0)
	if dspk {
		k = 1
	}
	m.with(func(cm *C.struct_mem) {
		r = C.walk(cm, C.ulonglong(start), C.ulonglong(target), C.longlong(dsp), k, &out)
	})
	return Block{int(out.count), uint64(out.last), int(out.kind)}, r == 0
}

// WalkTo runs pt_block_walk_to: the instructions from start until ip.
func (m Mem) WalkTo(start, ip uint64) (Block, bool) {
	var out C.struct_pt_block
	var r C.int
	m.with(func(cm *C.struct_mem) { r = C.walk_to(cm, C.ulonglong(start), C.ulonglong(ip), &out) })
	return Block{int(out.count), uint64(out.last), int(out.kind)}, r == 0
}
