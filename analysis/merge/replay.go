package merge

import (
	"cmp"
	"slices"
)

// replay calls f with each of the thread's items in time order, items of
// equal times in the order they came: each block is sorted on its own
// (stably; most are already in order and only checked), then the blocks
// are merged, an earlier block first on equal times.
func (t *Thread) replay(f func(item)) {
	byTime := func(a, b item) int { return cmp.Compare(a.time, b.time) }
	h := make(blockHeap, 0, len(t.blocks))
	for i, b := range t.blocks {
		if !slices.IsSortedFunc(b, byTime) {
			slices.SortStableFunc(b, byTime)
		}
		if len(b) > 0 {
			h = append(h, cursor{items: b, block: i})
		}
	}
	h.init()
	for len(h) > 0 {
		c := &h[0]
		f(c.items[0])
		c.items = c.items[1:]
		if len(c.items) == 0 {
			h.pop()
		} else {
			h.down(0)
		}
	}
}

// cursor is what is left of a sorted block.
type cursor struct {
	items []item
	block int // the block's place: the earlier first on equal times
}

func (a *cursor) before(b *cursor) bool {
	ta, tb := a.items[0].time, b.items[0].time
	return ta < tb || ta == tb && a.block < b.block
}

// blockHeap is a min-heap of cursors by their next item. The block in
// front usually stays there for many items (blocks overlap only where
// records came late), so each step costs a comparison or two.
type blockHeap []cursor

func (h blockHeap) init() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

// down moves the cursor at i down to its place.
func (h blockHeap) down(i int) {
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		m := l
		if r := l + 1; r < len(h) && h[r].before(&h[l]) {
			m = r
		}
		if !h[m].before(&h[i]) {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}

// pop removes the cursor in front.
func (h *blockHeap) pop() {
	n := len(*h) - 1
	(*h)[0] = (*h)[n]
	*h = (*h)[:n]
	h.down(0)
}
