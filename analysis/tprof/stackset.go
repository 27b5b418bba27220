package tprof

import (
	"cmp"
	"hash/maphash"
	"slices"
)

// stackSet is the distinct call stacks of a report while it is made: one
// a (thread, frames, truncated), its ticks and where it was first met.
// The counter counts into it as each process state's stacks are located,
// and once the frames are named, stacks that became equal are merged in it
// (mergeEqual). A stack is found by a hash of its key
// (stackKey), the stacks of one hash chained, no string made of a key
// (a table keyed by strings made one of each new stack). The stacks and
// their frames are kept in blocks: a slice grown by appends copied its
// 28 MB, and the frames' 40 MB, several times on a many-process trace.
type stackSet struct {
	blocks [][]stackAt
	n      int32
	frames [][]int32
	keyBuf []byte
	idx    map[uint64]int32 // by hash: the last stack of that hash
	seed   maphash.Seed
}

// stackAt is one distinct stack of a stackSet.
type stackAt struct {
	pid, tid  uint32
	blk, off  int32 // frames[blk][off:off+nf]
	nf        int32
	kernel    uint16 // the last kernel frames are kernel frames
	truncated bool
	n         uint64
	// where it was first met: its time, buffer, place in the buffer (the
	// one reader: time 0, the order met in pos)
	time uint64
	seq  int
	pos  int64
	next int32 // the stack met before it with its hash, or -1
}

// stackBlock is the number of stacks a block holds.
const stackBlock = 4096

func newStackSet() stackSet {
	return stackSet{idx: map[uint64]int32{}, seed: maphash.MakeSeed()}
}

// reserve sizes the empty table for n stacks (grown from empty, it was a
// sixth of a many-process replay).
func (s *stackSet) reserve(n int) {
	if s.n == 0 {
		s.idx = make(map[uint64]int32, n)
	}
}

func (s *stackSet) at(j int32) *stackAt { return &s.blocks[j/stackBlock][j%stackBlock] }

func (s *stackSet) framesOf(st *stackAt) []int32 {
	return s.frames[st.blk][st.off : st.off+st.nf : st.off+st.nf]
}

// find returns the index of the stack of (pid, tid, truncated, frames)
// and whether it is new: kept (of no ticks, its kernel frames, first met
// at time, seq, pos) when there is none.
func (s *stackSet) find(pid, tid uint32, truncated bool, frames []int32, kernel uint16, time uint64, seq int, pos int64) (int32, bool) {
	s.keyBuf = stackKey(s.keyBuf, pid, tid, truncated, frames)
	sum := maphash.Bytes(s.seed, s.keyBuf)
	prev, known := s.idx[sum]
	if !known {
		prev = -1
	}
	for j := prev; j >= 0; j = s.at(j).next {
		if st := s.at(j); st.pid == pid && st.tid == tid && st.truncated == truncated && slices.Equal(s.framesOf(st), frames) {
			return j, false
		}
	}
	j := s.n
	s.idx[sum] = j
	nf := len(s.frames)
	if nf == 0 || cap(s.frames[nf-1])-len(s.frames[nf-1]) < len(frames) {
		s.frames = append(s.frames, make([]int32, 0, max(1<<16, len(frames))))
		nf++
	}
	fb := &s.frames[nf-1]
	if s.n%stackBlock == 0 {
		s.blocks = append(s.blocks, make([]stackAt, 0, stackBlock))
	}
	s.blocks[len(s.blocks)-1] = append(s.blocks[len(s.blocks)-1], stackAt{pid: pid, tid: tid, blk: int32(nf - 1), off: int32(len(*fb)), nf: int32(len(frames)),
		kernel: kernel, truncated: truncated, time: time, seq: seq, pos: pos, next: prev})
	s.n++
	*fb = append(*fb, frames...)
	return j, true
}

// rename makes every frame name[frame] (a Loc's name).
// The table is stale after it: only mergeEqual reads the set then.
func (s *stackSet) rename(name []int32) {
	for _, fb := range s.frames {
		for j, l := range fb {
			fb[j] = name[l]
		}
	}
	s.idx = nil
}

// order is the stacks' indexes in the order they were first met.
func (s *stackSet) order() []int32 {
	order := make([]int32, s.n)
	sorted := true
	for i := range order {
		order[i] = int32(i)
		if i > 0 && sorted {
			a, b := s.at(int32(i-1)), s.at(int32(i))
			sorted = a.time < b.time || a.time == b.time && (a.seq < b.seq || a.seq == b.seq && a.pos <= b.pos)
		}
	}
	if sorted {
		return order
	}
	slices.SortFunc(order, func(i, j int32) int {
		a, b := s.at(i), s.at(j)
		switch {
		case a.time != b.time:
			return cmp.Compare(a.time, b.time)
		case a.seq != b.seq:
			return a.seq - b.seq
		}
		return cmp.Compare(a.pos, b.pos)
	})
	return order
}

// mergeEqual counts the stacks of order that are equal (after rename)
// together, each in the first of them, and returns the first ones, in
// order.
func (s *stackSet) mergeEqual(order []int32) []int32 {
	s.idx = make(map[uint64]int32, len(order))
	kept := order[:0]
	for _, j := range order {
		st := s.at(j)
		fr := s.framesOf(st)
		s.keyBuf = stackKey(s.keyBuf, st.pid, st.tid, st.truncated, fr)
		sum := maphash.Bytes(s.seed, s.keyBuf)
		prev, known := s.idx[sum]
		if !known {
			prev = -1
		}
		merged := false
		for k := prev; k >= 0; k = s.at(k).next {
			if o := s.at(k); o.pid == st.pid && o.tid == st.tid && o.truncated == st.truncated && slices.Equal(s.framesOf(o), fr) {
				o.n += st.n
				merged = true
				break
			}
		}
		if !merged {
			st.next = prev
			s.idx[sum] = j
			kept = append(kept, j)
		}
	}
	return kept
}

// stackKey is the key of a stack of (pid, tid) by its frames: what makes
// two stacks one.
func stackKey(key []byte, pid, tid uint32, truncated bool, frames []int32) []byte {
	t := byte(0)
	if truncated {
		t = 1
	}
	key = append(key[:0], byte(pid), byte(pid>>8), byte(pid>>16), byte(pid>>24), byte(tid), byte(tid>>8), byte(tid>>16), byte(tid>>24), t)
	for _, f := range frames {
		key = append(key, byte(f), byte(f>>8), byte(f>>16), byte(f>>24))
	}
	return key
}

// locStack is a stack by its frames' Locs (before rename): BuildWithAddresses
// keeps them for the profile's addresses.
type locStack struct {
	pid, tid  uint32
	frames    []int32 // Loc indexes, root first
	truncated bool
	n         uint64
}

// byLoc copies the stacks with their frames as they are (Loc indexes,
// before rename) and their ticks.
func (s *stackSet) byLoc() []locStack {
	frames := make([][]int32, len(s.frames))
	for i, fb := range s.frames {
		frames[i] = slices.Clone(fb)
	}
	out := make([]locStack, 0, s.n)
	for _, j := range s.order() {
		st := s.at(j)
		if st.n == 0 {
			continue
		}
		out = append(out, locStack{pid: st.pid, tid: st.tid, frames: frames[st.blk][st.off : st.off+st.nf : st.off+st.nf], truncated: st.truncated, n: st.n})
	}
	return out
}
