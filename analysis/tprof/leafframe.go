package tprof

import (
	"encoding/binary"
	"os"

	"perfinsp/analysis/a2n"
	"perfinsp/analysis/unwind"
	"perfinsp/format/trace"
)

// The frame a frame-pointer stack loses. A frame-pointer walk (the
// kernel's, for -g stacks) starts at the sampled PC and follows RBP: the
// first return address it finds is the one saved in the frame RBP points
// at. In a function that has not set up its own frame there (a true leaf,
// which gcc builds without one even with -fno-omit-frame-pointer; a
// prologue or epilogue), RBP is still its caller's, so that first return
// address is the caller's own, into the caller's caller: the caller is
// missing (perf shows leaf;outer;main where the code runs
// main;outer;mid;leaf). The function's call-frame information (.eh_frame)
// tells where this is so: the CFA is not computed from RBP at the PC. The
// caller lost is then the function that the call before that first return
// address calls (a direct call: E8 rel32), and it goes back between the
// two. Stacks unwound by call-frame information (trace.UnwindCFI) are
// whole already and left as they are; so is a stack where the call is
// indirect, into a PLT stub, or to the sampled function itself.

// leafFrames finds the missing frames of one report's stacks (not safe for
// concurrent use).
type leafFrames struct {
	r     *a2n.Resolver
	files map[string]*leafFile
}

// leafFile is one module file: its call-frame table and its bytes.
type leafFile struct {
	f *os.File
	t *unwind.Table // nil: none
}

func newLeafFrames(r *a2n.Resolver) *leafFrames {
	return &leafFrames{r: r, files: map[string]*leafFile{}}
}

func (x *leafFrames) file(path string) *leafFile {
	lf, ok := x.files[path]
	if ok {
		return lf
	}
	lf = &leafFile{}
	x.files[path] = lf
	f, err := os.Open(path)
	if err != nil {
		return lf
	}
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		f.Close()
		return lf
	}
	lf.f = f
	lf.t, _ = unwind.Load(f, st.Size())
	return lf
}

// close releases the files.
func (x *leafFrames) close() {
	for _, lf := range x.files {
		if lf.f != nil {
			lf.f.Close()
		}
	}
	x.files = map[string]*leafFile{}
}

// missing returns the address of the function a stack lost between its
// first user PC (leaf, where the sample was taken) and the return address
// after it (ret), and whether one was lost, for a stack with flags (its
// UNWIND record's).
func (x *leafFrames) missing(pid uint32, leaf, ret uint64, flags uint64) (uint64, bool) {
	if x == nil || flags&trace.UnwindCFI != 0 {
		return 0, false
	}
	l := x.r.Locate(pid, leaf, false)
	if l.Module() == "" {
		return 0, false
	}
	lf := x.file(l.Module())
	if lf.t == nil {
		return 0, false
	}
	if fromRBP, ok := lf.t.FrameFromRBP(l.FileOffset()); !ok || fromRBP {
		return 0, false
	}
	rl := x.r.Locate(pid, ret-1, false)
	if rl.Module() == "" || rl.FileOffset() < 4 {
		return 0, false
	}
	rf := x.file(rl.Module())
	if rf.f == nil {
		return 0, false
	}
	var call [5]byte
	if _, err := rf.f.ReadAt(call[:], int64(rl.FileOffset()-4)); err != nil || call[0] != 0xe8 {
		return 0, false
	}
	target := ret + uint64(int64(int32(binary.LittleEndian.Uint32(call[1:]))))
	tres := x.r.Resolve(pid, target, false)
	lres := x.r.Resolve(pid, leaf, false)
	if tres.PLT || tres.Module == "<unknown>" || target == leaf-lres.Offset {
		return 0, false
	}
	return target, true
}

// LeafFrames finds, for post's other writers of stacks (perf script
// form), the caller a frame-pointer stack lost, as the report's stacks
// have it. Not safe for concurrent use; call in trace order (it names
// addresses as the resolver's state has them).
type LeafFrames struct{ x *leafFrames }

// NewLeafFrames returns a finder reading the modules r locates.
func NewLeafFrames(r *a2n.Resolver) *LeafFrames { return &LeafFrames{newLeafFrames(r)} }

// Missing returns the address of the function a stack (pcs: the
// interrupted PC first; nk of them in the kernel; flags its UNWIND
// record's) lost between its first user PC and the return address after
// it, and whether one was lost.
func (l *LeafFrames) Missing(pid uint32, pcs []uint64, nk int, flags uint64) (uint64, bool) {
	if nk+1 >= len(pcs) {
		return 0, false
	}
	return l.x.missing(pid, pcs[nk], pcs[nk+1], flags)
}

// Close releases the module files read.
func (l *LeafFrames) Close() { l.x.close() }
