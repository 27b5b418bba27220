// Package calltree holds the stack frames of a time line as a call tree:
// each frame is a function (its name and module, ids of the writer's
// strings) called from its parent frame, and its id (1 up) names the
// call stack whose leaf it is. The time-line writers (format/traceevent,
// format/perfetto) ask it for a frame millions of times: it finds one in
// an open-addressed table of ids whose keys are the frames themselves,
// 4 bytes a slot, nothing the collector scans.
package calltree

// Frame is one frame: its parent's id (0: a root frame) and its
// function's name and module.
type Frame struct {
	Parent, Name, Mod int32
}

// Tree is a call tree of frames.
type Tree struct {
	frames []Frame
	slots  []int32 // frame ids (0: empty)
	n      int
}

// Of returns the id of the frame of function (name, mod) called from
// parent, adding it when new.
func (t *Tree) Of(parent, name, mod int32) int32 {
	k := Frame{parent, name, mod}
	slot := t.find(k)
	if id := t.slots[slot]; id != 0 {
		return id
	}
	t.frames = append(t.frames, k)
	id := int32(len(t.frames))
	t.add(slot, id)
	return id
}

// Frame is the frame id (1 up).
func (t *Tree) Frame(id int32) Frame { return t.frames[id-1] }

// Len is the number of frames: their ids are 1 to Len.
func (t *Tree) Len() int { return len(t.frames) }

func hash(k Frame) uint64 {
	h := uint64(uint32(k.Parent))*0x9e3779b97f4a7c15 + uint64(uint32(k.Name))*0xc2b2ae3d27d4eb4f + uint64(uint32(k.Mod))*0x165667b19e3779f9
	h ^= h >> 32
	h *= 0xff51afd7ed558ccd
	return h ^ h>>29
}

// find is the slot of k: its id's, or the empty slot where it goes.
func (t *Tree) find(k Frame) int {
	if t.slots == nil {
		t.slots = make([]int32, 1<<10)
	}
	mask := len(t.slots) - 1
	for i := int(hash(k)) & mask; ; i = (i + 1) & mask {
		id := t.slots[i]
		if id == 0 || t.frames[id-1] == k {
			return i
		}
	}
}

// add puts id in the empty slot find gave, growing the table at half
// full.
func (t *Tree) add(slot int, id int32) {
	t.slots[slot] = id
	t.n++
	if 2*t.n <= len(t.slots) {
		return
	}
	t.slots = make([]int32, 2*len(t.slots))
	mask := len(t.slots) - 1
	for j, f := range t.frames {
		i := int(hash(f)) & mask
		for t.slots[i] != 0 {
			i = (i + 1) & mask
		}
		t.slots[i] = int32(j + 1)
	}
}
